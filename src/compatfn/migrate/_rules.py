"""The codemod's rules, written once: the ``--help`` text and docs/migrating.md show them as
they are here (a test checks the page). Imports nothing, so ``--help`` works without LibCST.

Example::

    from compatfn.migrate._rules import RULES
    print(RULES)
"""

RULES = """\
Migrated, for every class deriving from torch.autograd.Function (any import spelling or alias,
or from such a class in the same file) whose forward takes ctx:
  - ctx.save_for_backward/save_for_forward/mark_dirty/mark_non_differentiable/
    set_materialize_grads calls, ctx.attr = ... assignments, and if blocks made only of them,
    move (in order) to setup_context(ctx, inputs, output);
  - a value they use that forward computed (not an input or output) becomes an intermediate:
    forward returns it after its outputs and the class gets @compatfn.function(intermediates=k)
    (forward's return annotation gains their types: a saved tensor's, else object; it is dropped
    where the file has no tuple spelling at hand or the tuple cannot be extended);
    one that setup_context could not compute again (reassigned, deleted or changed in place
    later, random, read from what a later call may change: a value handed to a function or
    method migrate does not know, such as a kernel launch or a helper, or module state; made
    with such a call, or with autocast or grad mode set by forward's decorator) is computed
    in forward at the same place under a new name; a value's shape, dtype and device, and
    which object it is, are not changed by calls;
  - @classmethod methods that do not use cls become @staticmethod; a forward or backward that
    uses cls becomes a classmethod _forward_impl/_backward_impl called from a staticmethod in
    the class and in each subclass in the same file; `return super().forward(ctx, ...)` chains
    to a migrated class in the same file are migrated with it;
  - torch.cuda.amp / torch.amp custom_fwd and custom_bwd (and module-level switches between
    them) become compatfn.custom_fwd/custom_bwd(device_type=...); the switch itself stays,
    and an import of them nothing else uses goes (a try/except between two such imports
    with it);
  - forward(ctx, a, *args) becomes forward(a, *args) (setup_context unpacks inputs[:1] and
    inputs[1:]); reads of ctx.attr in forward, where forward set it, use the value (a name of
    its own where needed; a literal such as `ctx.eps = 1e-6` as the literal, which
    setup_context sets again); an if block (nested ifs included) that computes values and saves
    some of them is split: forward keeps the computation, setup_context the ctx statements
    under the same conditions (on inputs, or on a name forward hands over as it is); where a
    condition tests a value forward computes, or one a later call may change, or makes such
    a call (an if block made only of ctx statements too), forward records which branch ran
    (branch_taken) and setup_context tests that; a name only some paths assign starts as
    None; ctx attributes set inside such blocks become local variables of forward; reads of
    ctx.needs_input_grad in forward become a tuple computed first from the inputs (a tensor
    that requires grad);
    in with blocks of grad mode (torch.no_grad/enable_grad/set_grad_enabled), device guards
    (torch.cuda.device/device_of, torch.device) and autocast, ctx calls on plain names move to
    setup_context, ctx attributes become local variables computed in the block, and a tail of
    the block that evaluates only names (`if flag is None: y = out; ctx.save_for_backward(y)`)
    moves after it; @torch.no_grad()/enable_grad() and @torch.jit.ignore/unused on forward
    stay; a backward without
    @staticmethod gets it; an input returned as it is and saved is returned as x.view_as(x)
    (torch 2.x requires it), which under torch.no_grad() requires grad where the original's
    output did not: a note on stderr (`path:line: Class: note: ...`) says so;
  - an if block made only of ctx statements that reads the random state (torch.get_rng_state,
    torch.cuda.get_rng_state, get_device_states, random.getstate, numpy's get_state) reads it
    in forward, at the same place and under the same conditions, into names forward hands
    over; setup_context sets the ctx attributes only where the original did;
  - a return whose number of outputs cannot be read (`return (ys, *extra)`, a name holding a
    tuple) stays one item, followed by the intermediates;
  - @compatfn.function and `import compatfn` are added (--decorator: your vendored copy), where
    isort and ruff put them, with the project's known first/third-party modules, isort's
    default_section and force_sort_within_sections read from its settings.
Fn.apply(...) callers need no change; comments, formatting, line endings, encoding and a
byte-order mark are kept; a line migrate writes longer than the file's line length (black's or
ruff's line-length, or flake8's max-line-length, in the nearest pyproject.toml, ruff.toml,
setup.cfg, tox.ini or .flake8, flake8's 79 for a `[flake8]` section without one; where none is
set, the file's longest line, from 79 to 88) is wrapped as black wraps it (a trailing comment
at the end of the last line; a line with `# type: ignore` or `# fmt: skip`, or two statements,
left whole; a layout that would parse as other code is never written; a comma after *args
where black puts one: in a `def` where black's target-version, else requires-python, or the
file's own syntax says Python 3.6+, in a call where they say 3.5+); a statement of several
lines that migrate changes is laid out again as black lays it out, on one line where it fits,
where its lines were black's (its comments at the end; a statement in your own style, or with
a comment on a line of its own, keeps its lines); your own lines are left as they are; a
second run changes nothing. Each rewrite is checked before it is written: the new class must
compile and its methods read no name they do not bind on every path (where the original did);
a class that fails the check is refused.

Refused (left untouched, reported as `path:line: Class: reason` on stderr, with the change that
would let it through): ctx attributes forward does not set read back, or ctx passed to a
helper inside forward; ctx used in loops, try blocks, other with blocks, nested functions, or
in a nested if whose condition tests a value forward computes; a ctx call inside a with block
given a computed value (name it first) or a name the block assigns again after the call; a
random value or the random state set on ctx in an if block that also computes values, or drawn
in the condition of such a block, or a ctx value computed under a condition from a tensor
forward changes in place later (through a view, an alias, out=, inplace= or a method ending in
_) or from what a later call may change (name it first); := in a statement that would move;
a list passed as *args to a ctx call and changed after it; del ctx.attr; an input named ctx;
early or bare returns next to ctx calls; keyword-only or **kwargs parameters; an
instance-method forward (the legacy style torch no longer runs); unknown forward decorators;
super() calls other than `return super().forward(ctx, ...)` to a migrated class in
the same file, and a backward that calls super(); a whole in-file class hierarchy when one of
its classes is refused; a class deriving from torch's InplaceFunction or NestedIOFunction;
every class of a file LibCST cannot write back byte for byte (a form feed inside a class, a
CR-only file). Not seen: subclasses in other files (migrate them in the
same run, or they keep calling the old forward(ctx, ...)).
"""

EXIT_STATUS = """\
Exit status: 0 done (refusals included, unless --strict); 1 with --check when a file would
change, with --strict when a class is refused, with --verify when a call differs, or a file that
cannot be written; 2 a usage error
(missing path, a file that cannot be read or parsed, libcst not installed), or a --verify test
command that cannot start or runs past --verify-timeout (3600 s unless set). Each file is
handled on its own: one that fails is reported and the run goes on; --write replaces a file in
one step, so none is ever half-written.
"""

DESCRIPTION = (
    "Rewrite legacy torch.autograd.Function classes (forward(ctx, ...)) to the setup_context "
    "style with @compatfn.function, so that they run on every torch from 1.8 and work with "
    "torch.func."
)
