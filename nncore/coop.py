"""A CPU training step as one cooperative kernel: one parallel loop of one task per thread, the step's loops
shared out inside it, spin barriers between them.

Why: Taichi's CPU thread pool wakes its workers through a condition variable for every parallel loop and waits
on another for them to finish, which costs more than a small loop's work (docs/LOG.md, "cooperative CPU
steps"). Here the pool is woken once a step: each of its T tasks runs the whole step, takes its share of each
of the step's loops, and waits at a barrier (a few atomics on a small field) before the next loop.

How: ``cooperative(fn)`` rewrites an nncore kernel's Python function (its source, with ``ast``) into a ti.func
with three more parameters (the sync field, the thread's index, the thread count); ``nncore.graph`` calls
them one after another inside ``for tid in range(T)`` (``graph.fuse_plan``'s ``threads``). In the rewrite,
every loop that Taichi would have run as a parallel loop of its own (a loop at the function's top level, in a
``ti.static`` branch or unrolled loop there, or at the top level of a ti.func called there) becomes a serial
loop over the thread's block of iterations and then chunks claimed from a counter, followed by a barrier; a
loop configured ``serialize=True`` (an ordered sum) and any other statement with effects run on thread 0
alone, then a barrier. Which thread computes an iteration changes nothing in it, so results equal the
one-thread step's bit for bit. What the rewrite does not know (a ``while`` at the top level, a closure, a loop
over something other than ``range``, ``ti.ndrange`` or an ndarray's indices) raises ``NotCooperative``, and the
step keeps Taichi's own loops.

Only where the workers are pinned one to a core (nncore.pinning), or on one thread: two spinning workers on
one core would wait for each other until the scheduler's next tick; and only for a step with a kernel large
enough for the pool (``pays``). Spinning needs the cores: where another busy process shares them, the
cooperative step runs slower than Taichi's loops (docs/LOG.md), so ``graph.StepGraphs`` times the two against
each other now and then and runs the faster (``graph._Duel``); LAYERLAB_COOP=0 turns it off. The kernel is one
large task, which takes seconds to compile, so it is built only once a launch sequence recurs (``coop_after``).
"""

import ast
import inspect
import itertools
import os
import textwrap
import types

from . import kernels as _k
from . import runtime
from .runtime import ti

# How a loop's n iterations are shared among nt threads: each takes a fixed block of SHARE * n / nt, the rest
# goes in chunks of (rest / (CHUNKS * nt)) claimed from a counter (about 0.1 us a claim: an atomic on a line both
# cores write). All of them in fixed blocks: thread t takes the t-th of nt equal parts of every loop, so where
# two loops run over the batch in order (the conv forward by sample, the narrow Linear's sums by halves of the
# batch), each core reads the rows it wrote, where a quarter claimed in chunks sent them to either core
# (docs/LOG.md, "cnn64's halves"). A thread slowed down on a shared VM then holds the others up at the barrier;
# graph.StepGraphs' duel moves a step that loses by it back to Taichi's loops.
SHARE = (1, 1)
CHUNKS = 4
# The sync field's slots, a cache line apart (64 bytes): arrivals at the barrier, its generation, the claim
# counter, and a zero that the spin loops add (an atomic read the compiler cannot fold away).
ARRIVE, GEN, CLAIM, ZERO = 0, 16, 32, 48


class NotCooperative(Exception):
    """A kernel the rewrite does not handle."""


@ti.func
def claim(sync: ti.template()) -> ti.i32:
    """The next chunk of the current loop (chunks are handed out in order; the counter is reset at the barrier)."""
    return ti.atomic_add(sync[CLAIM], 1)


@ti.func
def barrier(sync: ti.template(), nt: ti.template()):
    """Wait until all ``nt`` threads arrive. The last to arrive resets the claim counter for the next loop (all
    claims of this one are done: every thread claims until it runs out before it arrives) and the arrivals,
    then moves the generation on, which releases the others."""
    if ti.static(nt > 1):
        gen = ti.atomic_add(sync[GEN], sync[ZERO])
        if ti.atomic_add(sync[ARRIVE], 1) == nt - 1:
            ti.atomic_sub(sync[CLAIM], ti.atomic_add(sync[CLAIM], sync[ZERO]))
            ti.atomic_sub(sync[ARRIVE], nt)
            ti.atomic_add(sync[GEN], 1)
        else:
            while ti.atomic_add(sync[GEN], sync[ZERO]) == gen:
                pass
    else:
        sync[CLAIM] = 0


_sync = {"gen": None, "field": None}


def sync_field():
    """The runtime's sync field (one per Taichi runtime: steps never run at the same time), made on first use
    (in Python scope: Taichi makes no fields while it compiles a kernel)."""
    if _sync["gen"] != runtime.generation():
        _sync["field"] = ti.field(ti.i32, shape=64)
        _sync["gen"] = runtime.generation()
    return _sync["field"]


def current_sync():
    """The sync field of the runtime a kernel is compiling for (``sync_field`` made it)."""
    if _sync["gen"] != runtime.generation():
        raise RuntimeError("no sync field for this runtime: nncore.coop.sync_field() makes it")
    return _sync["field"]


def enabled() -> bool:
    """Whether CPU steps may run as cooperative kernels: yes, unless the environment variable LAYERLAB_COOP=0
    turns them off (``pays`` and ``threads`` say where they do)."""
    return os.environ.get("LAYERLAB_COOP", "").strip() != "0"


def pays(calls) -> bool:
    """Whether a step of these recorded calls gains from a cooperative kernel: where one of its kernels is large
    enough to run on the pool (nncore.kernels.IN_PLACE_NS), each such loop costs a hand-off that the
    cooperative step saves. A step of small kernels only (the quadrant network's) runs in place on one thread,
    with no hand-off to save, and split over threads it would be mostly barriers."""
    return any(_k.work_of(c) >= _k.IN_PLACE_NS for c in calls)


def threads() -> int:
    """The threads of a cooperative step on this runtime: all of a CPU runtime's, where there is one thread or
    each is pinned to a core of its own; 0 (no cooperative step) on CUDA or with unpinned workers."""
    cur = runtime.current()
    if cur is None or cur.arch == "cuda":
        return 0
    if cur.threads == 1:
        return 1
    return cur.threads if len(set(cur.pinned)) == cur.threads else 0


_made: dict = {}
_serial = itertools.count()


def cooperative(fn):
    """``fn`` (an nncore kernel's or ti.func's Python function) rewritten as a ti.func taking its own arguments
    (every one a template, as ``graph._as_func`` passes them) and then (sync, tid, nt). Cached per function."""
    got = _made.get(fn)
    if got is None:
        got = _made[fn] = _rewrite(fn)
    return got


def _is_static(node) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "static"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "ti")


def _is_loop_config(stmt) -> bool:
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Attribute) and stmt.value.func.attr == "loop_config")


def _resolve(node, env: dict):
    """The Python object a (dotted) name refers to in ``env``, or None."""
    if isinstance(node, ast.Name):
        return env.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _resolve(node.value, env)
        return getattr(base, node.attr, None) if base is not None else None
    return None


def _ti_func_of(call, env: dict):
    """The Python function of the ti.func ``call`` calls, if it is one defined in Python source."""
    obj = _resolve(call.func, env)
    if not getattr(obj, "_is_taichi_function", False):
        return None
    fn = getattr(obj.func, "func", None)  # (ti.func's wrapper -> its Func -> the Python function)
    return fn if isinstance(fn, types.FunctionType) else None


def _has_loop(stmts) -> bool:
    return any(isinstance(n, (ast.For, ast.While)) for s in stmts for n in ast.walk(s))


def _parse(src: str) -> ast.stmt:
    return ast.parse(textwrap.dedent(src)).body[0]


class _Rewriter:
    def __init__(self, env: dict):
        self.env = env
        self.n = 0  # for unique local names
        self.funcs: dict = {}  # helper name -> cooperative ti.func it calls

    def name(self, base: str) -> str:
        self.n += 1
        return f"_{base}{self.n}"

    def block(self, stmts: list) -> list:
        """A statement list at the top level of a kernel (or of a function inlined there)."""
        out, config = [], {}
        for s in stmts:
            if _is_loop_config(s):
                config = {k.arg: k.value for k in s.value.keywords}
                continue
            out += self.stmt(s, config)
            if isinstance(s, ast.For):
                config = {}
        return out

    def stmt(self, s, config: dict) -> list:
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant):
            return [s]  # a docstring
        if isinstance(s, ast.Pass):
            return [s]
        if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = s.targets if isinstance(s, ast.Assign) else [s.target]
            names = [n for t in targets for n in (t.elts if isinstance(t, ast.Tuple) else [t])]
            if all(isinstance(n, ast.Name) for n in names) and not _has_loop([s]):
                return [s]  # a local: every thread computes it
            return self.once([s])
        if isinstance(s, ast.If):
            if _is_static(s.test):
                s.body = self.block(s.body) or [ast.Pass()]
                s.orelse = self.block(s.orelse)
                return [s]
            return self.once([s])
        if isinstance(s, ast.For):
            if _is_static(s.iter):  # unrolled: its body is at the top level too
                s.body = self.block(s.body) or [ast.Pass()]
                return [s]
            serialize = config.get("serialize")
            if isinstance(serialize, ast.Constant) and serialize.value is True:
                return self.once([s])
            return self.shared(s)
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
            fn = _ti_func_of(s.value, self.env)
            if fn is not None:
                if not _has_loop(_parse(inspect.getsource(fn)).body):
                    return self.once([s])
                helper = self.name("coop")
                self.funcs[helper] = cooperative(fn)
                call = s.value
                call.func = ast.Name(helper, ast.Load())
                call.args += [ast.Name(a, ast.Load()) for a in ("_sync", "_tid", "_nt")]
                return [s]
            return self.once([s])
        raise NotCooperative(f"line {s.lineno}: {type(s).__name__} at a kernel's top level")

    def once(self, stmts: list) -> list:
        """Statements with effects: thread 0 runs them, the others wait at the barrier after them."""
        return [ast.If(_expr("_tid == 0"), stmts, []), _stmt("_coop_barrier(_sync, _nt)")]

    def shared(self, s: ast.For) -> list:
        """A loop over range(...) or ti.ndrange(...) as chunks claimed from the counter, then a barrier."""
        it = s.iter
        targets = s.target.elts if isinstance(s.target, ast.Tuple) else [s.target]
        if isinstance(it, (ast.Name, ast.Attribute)):  # over an ndarray's indices: as ti.ndrange over its shape
            arr = ast.unparse(it)
            it = _expr(f"ti.ndrange({', '.join(f'{arr}.shape[{d}]' for d in range(len(targets)))})")
        if not isinstance(it, ast.Call):
            raise NotCooperative(f"line {s.lineno}: a loop over {ast.unparse(it)}")
        fname = ast.unparse(it.func)
        if not all(isinstance(t, ast.Name) for t in targets):
            raise NotCooperative(f"line {s.lineno}: loop targets {ast.unparse(s.target)}")
        names = [t.id for t in targets]
        if fname == "range" and len(it.args) in (1, 2) and len(names) == 1:
            lo, hi = (ast.unparse(it.args[0]), ast.unparse(it.args[1])) if len(it.args) == 2 \
                else ("0", ast.unparse(it.args[0]))
            dims = None
        elif fname == "ti.ndrange" and len(names) == len(it.args) and all(
                not isinstance(a, (ast.Tuple, ast.List)) for a in it.args):
            lo, hi = "0", None
            dims = [ast.unparse(a) for a in it.args]
        else:
            raise NotCooperative(f"line {s.lineno}: a loop over {ast.unparse(it)}")
        n, k, e, i, b, st, c = (self.name(x) for x in ("n", "k", "e", "i", "b", "s", "c"))
        lines = [f"{b} = {lo}"]
        if dims is None:
            lines.append(f"{n} = {hi} - {b}")
        else:
            ds = [self.name("d") for _ in dims]
            lines += [f"{d} = {x}" for d, x in zip(ds, dims)]
            lines.append(f"{n} = " + " * ".join(ds))
        # Each thread first runs a static block of SHARE of the iterations (the same block every step and every
        # loop of this length: what it wrote there is still in its cache), then the rest in chunks claimed in turn.
        lines += [f"{st} = ({SHARE[0]} * {n}) // ({SHARE[1]} * _nt)",
                  f"{c} = ti.max(1, ({n} - _nt * {st}) // ({CHUNKS} * _nt))",
                  f"{k} = _tid * {st}",
                  f"{e} = {k} + {st}",
                  f"while {k} < {n}:",
                  f"    for {i} in range({k}, {e}):",
                  "        pass",
                  f"    {k} = _nt * {st} + _coop_claim(_sync) * {c}",
                  f"    {e} = ti.min({k} + {c}, {n})",
                  "_coop_barrier(_sync, _nt)"]
        code = ast.parse("\n".join(lines)).body
        inner = code[-2].body[0]  # the for over the block or chunk
        if dims is None:
            head = [_stmt(f"{names[0]} = {b} + {i}")]
        else:  # the loop variables from the flat index, the last dimension fastest, as ti.ndrange runs
            head, rest = [], i
            for pos in range(len(dims) - 1, 0, -1):
                q = self.name("q")
                head += [_stmt(f"{names[pos]} = {rest} % {ds[pos]}"), _stmt(f"{q} = {rest} // {ds[pos]}")]
                rest = q
            head.append(_stmt(f"{names[0]} = {rest}"))
        inner.body = head + s.body
        return code


def _expr(src: str):
    return ast.parse(src, mode="eval").body


def _stmt(src: str):
    return ast.parse(src).body[0]


def _rewrite(fn):
    if fn.__closure__:
        raise NotCooperative(f"{fn.__name__}: a closure")
    try:
        node = _parse(inspect.getsource(fn))
    except (OSError, TypeError, SyntaxError) as exc:
        raise NotCooperative(f"{fn.__name__}: no source ({exc})") from None
    if not isinstance(node, ast.FunctionDef):
        raise NotCooperative(f"{fn.__name__}: not a function definition")
    rw = _Rewriter(fn.__globals__)
    body = rw.block(node.body)
    node.decorator_list = []
    node.returns = None
    params = [a.arg for a in node.args.args] + ["_sync", "_tid", "_nt"]
    node.args = ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in params], vararg=None, kwonlyargs=[],
                              kw_defaults=[], kwarg=None, defaults=[])
    node.body = body or [ast.Pass()]
    name = f"{fn.__name__}_coop{next(_serial)}"
    node.name = name
    helpers = {"_coop_claim": claim, "_coop_barrier": barrier, **rw.funcs}
    # The helpers reach the function as closure variables (Taichi reads a function's globals and its closure's
    # cells), so the module's own namespace stays as it is.
    factory = ast.FunctionDef(name="_factory", args=ast.arguments(
        posonlyargs=[], args=[ast.arg(h) for h in helpers], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
        defaults=[]), body=[node, ast.Return(ast.Name(name, ast.Load()))], decorator_list=[], returns=None)
    src = ast.unparse(ast.fix_missing_locations(ast.Module([factory], type_ignores=[]))) + "\n"
    filename = f"<nncore {name}>"
    _k.register_source(filename, src)  # Taichi reads the source
    module = compile(src, filename, "exec", dont_inherit=True)
    code = next(c for c in module.co_consts if isinstance(c, types.CodeType))
    made = types.FunctionType(code, fn.__globals__, "_factory")(*helpers.values())
    made.__annotations__ = {p: ti.template() for p in params}
    made.__module__ = fn.__module__
    return ti.func(made)
