#!/usr/bin/python3
"""gen_cases.py - deterministic random einsum programs with random shardings.

Each case is a small .ein program (docs/language.md) plus, for every output,
a NumPy expression that computes the same tensor from the inputs.  The
runner (run_cases.py) compiles the program with einc, runs it on random
inputs and compares each output with its NumPy value.

How a case is built: a template (one per category below) chooses the dims
and the statements as a small expression tree; every input, left side and
output then gets a random sharding over a random mesh (1D, 2D or 3D, total
size 1, 2, 4 or 8), and only after that are the dim sizes fixed: each dim's
size is a multiple of every product of mesh axis sizes that shards it
(seed 001: a sharded dim holds equal blocks on every device), so odd and
prime sizes (3, 5, 7, 15) appear where a dim is left unsharded and sizes
like 6 where it is split over 2.

Dtypes: f32 for most cases, f64 for a quarter, bf16 for a tenth (the
runtime's third dtype, stored in .npy files as f32 holding bf16 values).

The same tree renders twice: as .ein text and as NumPy.  The language's
rule (frontend/lower.c, "Einstein convention at the statement level only")
is that each top-level term of `L[l] = t1 + t2 ...` is summed over the
indices it has and `l` lacks, while parenthesised and call factors are
elementwise over the union of their indices (nothing summed inside); a term
missing some of `l`'s indices is broadcast.  NumPy's einsum does exactly
that when its output labels are the union (elementwise) or `l`'s (summed),
and `bc` broadcasts a term to `l`.

gelu is the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
x^3))), as codegen/elementwise.c emits it; silu is x * sigmoid(x).

Usage: gen_cases.py [--seed N] [--list] [--show NAME]
"""
import argparse
import math
import random
import sys

MESHES = {
    1: [[("X", 1)], [("X", 2)], [("X", 4)], [("X", 8)]],
    2: [[("X", 2), ("Y", 2)], [("X", 2), ("Y", 4)], [("X", 4), ("Y", 2)],
        [("X", 1), ("Y", 2)], [("X", 2), ("Y", 1)], [("X", 1), ("Y", 1)]],
    3: [[("X", 2), ("Y", 2), ("Z", 2)], [("X", 1), ("Y", 2), ("Z", 2)],
        [("X", 2), ("Y", 1), ("Z", 2)], [("X", 1), ("Y", 1), ("Z", 1)]],
}
# Dim names: single capital letters that are not mesh axis names.
DIM_NAMES = "IJKLMNBDFHPQRST"
ELEMENTWISE_FUNCS = ["exp", "tanh", "relu", "gelu", "silu", "sigmoid", "neg"]
POSITIVE_FUNCS = ["log", "sqrt", "rsqrt"]  # need a positive argument


# ---- expression tree -------------------------------------------------------

class Ref:
    """A tensor reference `A[I, J]` (labels are dim names)."""

    def __init__(self, name, labels):
        self.name, self.labels = name, list(labels)


class Num:
    """A number factor."""

    def __init__(self, value):
        self.value = value


class Paren:
    """`( sum )`: elementwise over the union of its indices."""

    def __init__(self, terms):
        self.terms = terms


class Call:
    """`fn( sum )`: elementwise function of an elementwise sum."""

    def __init__(self, fn, terms):
        self.fn, self.terms = fn, terms


class Idx:
    """An index value `T`: the element's global position along dim T."""

    def __init__(self, dim):
        self.dim = dim


class Div:
    """A factor written after `/`: the term divides by it."""

    def __init__(self, f):
        self.f = f


class Call2:
    """`maximum(a, b)` / `minimum(a, b)` of two elementwise sums."""

    def __init__(self, fn, a, b):
        self.fn, self.a, self.b = fn, a, b


class Where:
    """`where(l op r, a, b)` over four elementwise sums."""

    def __init__(self, op, l, r, a, b):
        self.op, self.l, self.r, self.a, self.b = op, l, r, a, b

    def sums(self):
        return [self.l, self.r, self.a, self.b]


class Gather:
    """`Emb[Tok[B, T], D]`: rows of table `name` (first dim `row`) looked up
    by the i32 tensor `ids` (labels `ids_labels`); `rest` labels the
    table's other dims."""

    def __init__(self, name, row, ids, ids_labels, rest):
        self.name, self.row, self.ids = name, row, ids
        self.ids_labels, self.rest = list(ids_labels), list(rest)


class Red:
    """`max(sum, D)` (also sum, min, mean): a reduction over the named index."""

    def __init__(self, fn, terms, dim):
        self.fn, self.terms, self.dim = fn, terms, dim


class Softmax:
    """`softmax(sum, D)`: normalised over index D (stable)."""

    def __init__(self, terms, dim):
        self.terms, self.dim = terms, dim


# A sum is a list of (sign, [factor, ...]) terms.

def factor_labels(f):
    if isinstance(f, Ref):
        return list(f.labels)
    if isinstance(f, Num):
        return []
    if isinstance(f, Idx):
        return [f.dim]
    if isinstance(f, Gather):
        return f.ids_labels + f.rest
    if isinstance(f, Div):
        return factor_labels(f.f)
    if isinstance(f, Call2):
        return sum_labels(f.a + f.b)
    if isinstance(f, Where):
        return sum_labels([t for s in f.sums() for t in s])
    if isinstance(f, Red):
        return [d for d in sum_labels(f.terms) if d != f.dim]
    return sum_labels(f.terms)


def term_labels(factors):
    out = []
    for f in factors:
        for lab in factor_labels(f):
            if lab not in out:
                out.append(lab)
    return out


def sum_labels(terms):
    out = []
    for _, fs in terms:
        for lab in term_labels(fs):
            if lab not in out:
                out.append(lab)
    return out


def fmt_num(v):
    # The grammar has no negative literal factor: `A * -1.0` is written `A * (-1.0)`.
    return repr(float(v)) if v >= 0 else "(-%r)" % float(-v)


def ein_factor(f):
    if isinstance(f, Ref):
        return "%s[%s]" % (f.name, ", ".join(f.labels))
    if isinstance(f, Num):
        return fmt_num(f.value)
    if isinstance(f, Idx):
        return f.dim
    if isinstance(f, Gather):
        return "%s[%s[%s]%s]" % (f.name, f.ids, ", ".join(f.ids_labels),
                                 "".join(", " + r for r in f.rest))
    if isinstance(f, Call2):
        return "%s(%s, %s)" % (f.fn, ein_sum(f.a), ein_sum(f.b))
    if isinstance(f, Where):
        return "where(%s %s %s, %s, %s)" % (ein_sum(f.l), f.op, ein_sum(f.r), ein_sum(f.a),
                                            ein_sum(f.b))
    if isinstance(f, Red):
        return "%s(%s, %s)" % (f.fn, ein_sum(f.terms), f.dim)
    if isinstance(f, Softmax):
        return "softmax(%s, %s)" % (ein_sum(f.terms), f.dim)
    if isinstance(f, Paren):
        return "(%s)" % ein_sum(f.terms)
    return "%s(%s)" % (f.fn, ein_sum(f.terms))


def ein_sum(terms):
    s = ""
    for i, (sign, fs) in enumerate(terms):
        body = ""
        for k, f in enumerate(fs):
            if isinstance(f, Div):
                body += " / " + ein_factor(f.f)
            else:
                body += (" * " if k else "") + ein_factor(f)
        if i == 0:
            s = ("-" if sign < 0 else "") + body
        else:
            s += (" - " if sign < 0 else " + ") + body
    return s


class NpRender:
    """Renders trees as NumPy code over lower-case einsum letters."""

    def __init__(self, letters):
        self.letters = letters  # dim name -> einsum letter

    def spec(self, labels):
        return "".join(self.letters[d] for d in labels)

    def product(self, factors, out_labels):
        """einsum of the tensor-valued factors onto out_labels, times the numbers."""
        ops, specs, scale = [], [], 1.0
        for f in factors:
            if isinstance(f, Num):
                scale *= f.value
            elif isinstance(f, Div) and isinstance(f.f, Num):
                scale /= f.f.value
            elif isinstance(f, Div):
                ops.append("(1.0 / %s)" % self.factor(f.f))
                specs.append(self.spec(factor_labels(f.f)))
            else:
                ops.append(self.factor(f))
                specs.append(self.spec(factor_labels(f)))
        if not ops:
            return "np.full((), %r)" % scale
        code = "es('%s->%s', %s)" % (",".join(specs), self.spec(out_labels), ", ".join(ops))
        if scale != 1.0:
            code = "(%r * %s)" % (scale, code)
        return code

    def factor(self, f):
        if isinstance(f, Ref):
            return f.name
        if isinstance(f, Idx):
            return "iota('%s')" % self.spec([f.dim])
        if isinstance(f, Gather):
            return "%s[%s.astype(np.int64)]" % (f.name, f.ids)
        if isinstance(f, Paren):
            return self.elementwise(f.terms)
        if isinstance(f, (Red, Softmax)):
            axis = sum_labels(f.terms).index(f.dim)
            fn = "softmax" if isinstance(f, Softmax) else "np." + f.fn
            return "%s(%s, axis=%d)" % (fn, self.elementwise(f.terms), axis)
        if isinstance(f, (Call2, Where)):
            # Every argument over its own indices, broadcast to the union.
            union = self.spec(factor_labels(f))
            sums = [f.a, f.b] if isinstance(f, Call2) else f.sums()
            args = ["bc(%s, '%s', '%s')" % (self.elementwise(t), self.spec(sum_labels(t)), union)
                    for t in sums]
            if isinstance(f, Call2):
                return "np.%s(%s, %s)" % (f.fn, args[0], args[1])
            return "np.where(%s %s %s, %s, %s)" % (args[0], f.op, args[1], args[2], args[3])
        return "%s(%s)" % (f.fn, self.elementwise(f.terms))

    def elementwise(self, terms):
        """A parenthesised sum: every term over its own indices, broadcast to the union."""
        union = sum_labels(terms)
        parts = []
        for sign, fs in terms:
            tl = term_labels(fs)
            code = "bc(%s, '%s', '%s')" % (self.product(fs, tl), self.spec(tl), self.spec(union))
            parts.append(("-" if sign < 0 else "+") + code)
        return "(" + " ".join(parts) + ")"

    def statement(self, lhs_labels, terms):
        """A top-level sum: each term summed over what the left side lacks."""
        parts = []
        for sign, fs in terms:
            kept = [d for d in term_labels(fs) if d in lhs_labels]
            code = "bc(%s, '%s', '%s')" % (self.product(fs, kept), self.spec(kept),
                                           self.spec(lhs_labels))
            parts.append(("-" if sign < 0 else "+") + code)
        return " ".join(parts)


# ---- programs --------------------------------------------------------------

class Program:
    """A program under construction: dims, mesh, tensors, statements, outputs."""

    def __init__(self, rng, name, category, mesh, dtype):
        self.rng, self.name, self.category = rng, name, category
        self.mesh, self.dtype = mesh, dtype
        self.dims = []          # dim names in order of creation
        self.ties = []          # groups of dims that must have equal sizes
        self.decls = []         # (kind, name, labels, sharding)
        self.stmts = []         # (name, labels, sharding or None, unreduced axes, terms)
        self.outputs = []       # (name, sharding or None)
        self.labels_of = {}     # tensor name -> labels
        self.int_inputs = {}    # i32 input name -> the dim its values index
        self.overrides = []     # dims and mesh axes whose size comes from `einc -D`
        self.multiple = {}      # dim -> extra factor its size must be a multiple of
        self.flags = []         # extra einc options

    def new_dims(self, n):
        out = []
        for _ in range(n):
            d = DIM_NAMES[len(self.dims)]
            self.dims.append(d)
            out.append(d)
        return out

    def axis_sizes(self):
        return dict(self.mesh)

    def random_sharding(self, labels, p=0.6, avoid=()):
        """A random sharding of `labels`: each mesh axis shards one dim or none."""
        sh = {d: "" for d in labels}
        axes = [a for a, _ in self.mesh if a not in avoid]
        self.rng.shuffle(axes)
        for a in axes:
            if labels and self.rng.random() < p:
                d = self.rng.choice(labels)
                sh[d] += a
        return sh

    def decl(self, kind, name, labels, sharding=None):
        if sharding is None:
            sharding = self.random_sharding(labels)
        self.decls.append((kind, name, list(labels), sharding))
        self.labels_of[name] = list(labels)

    def input(self, name, labels, sharding=None):
        self.decl(self.rng.choice(["input", "input", "param"]), name, labels, sharding)

    def index_input(self, name, labels, table_row):
        """An i32 input whose values index dim `table_row` of a table."""
        self.decl("input", name, labels)
        self.int_inputs[name] = table_row

    def stmt(self, name, labels, terms, sharding=None, unreduced=()):
        self.stmts.append((name, list(labels), sharding, list(unreduced), terms))
        self.labels_of[name] = list(labels)

    def output(self, name, sharding=None):
        self.outputs.append((name, sharding))

    def maybe_constraint(self, labels, p):
        return self.random_sharding(labels) if self.rng.random() < p else None

    # -- sizes --
    def finalize_sizes(self):
        """Each dim: a multiple of the lcm of the axis products that shard it."""
        sizes_of_axes = self.axis_sizes()
        need = {d: 1 for d in self.dims}

        def add(sh):
            if not sh:
                return
            for d, axes in sh.items():
                prod = 1
                for a in axes:
                    prod *= sizes_of_axes[a]
                need[d] = need[d] * prod // math.gcd(need[d], prod)

        for _, _, _, sh in self.decls:
            add(sh)
        for _, _, sh, _, _ in self.stmts:
            add(sh)
        for _, sh in self.outputs:
            add(sh)
        for d, m in self.multiple.items():
            need[d] = need[d] * m // math.gcd(need[d], m)
        # Tied dims (relabels) share one size: merge their needs.
        for group in self.ties:
            l = 1
            for d in group:
                l = l * need[d] // math.gcd(l, need[d])
            for d in group:
                need[d] = l
        sizes = {}
        for d in self.dims:
            if d in sizes:
                continue
            if need[d] == 1:
                size = self.rng.choice([1, 2, 3, 4, 5, 6, 7, 15])
            else:
                size = need[d] * self.rng.choice([1, 1, 2, 3])
            sizes[d] = size
            for group in self.ties:
                if d in group:
                    for e in group:
                        sizes[e] = size
        # One case in eight scales two dims by 16 (keeping divisibility), so
        # blocks are large enough for BLAS's blocked paths, not only tiny GEMMs.
        if self.rng.random() < 0.125:
            for d in self.rng.sample(self.dims, min(2, len(self.dims))):
                group = next((g for g in self.ties if d in g), [d])
                for e in group:
                    sizes[e] *= 16
        self.sizes = sizes

    # -- rendering --
    def ein_tref(self, name, labels, sh, unreduced=()):
        idx = []
        for d in labels:
            axes = sh.get(d, "") if sh else ""
            idx.append(d + ("_" + axes if axes else ""))
        s = "%s[%s]" % (name, ", ".join(idx))
        if unreduced:
            s += "{%s}" % ", ".join("U_" + a for a in unreduced)
        return s

    def source(self):
        lines = ["# e2e case %s (%s)" % (self.name, self.category)]
        # An overridden size is written as a placeholder that would not even
        # divide: only the -D value may take effect.
        def size(name, n):
            return 1000003 if name in self.overrides else n
        lines.append("mesh " + ", ".join("%s=%d" % (a, size(a, n)) for a, n in self.mesh))
        lines.append("dim " + ", ".join("%s=%d" % (d, size(d, self.sizes[d])) for d in self.dims))
        for kind, name, labels, sh in self.decls:
            dt = "i32" if name in self.int_inputs else self.dtype
            lines.append("%s %s: %s" % (kind, self.ein_tref(name, labels, sh), dt))
        for name, labels, sh, unred, terms in self.stmts:
            lines.append("%s = %s" % (self.ein_tref(name, labels, sh, unred), ein_sum(terms)))
        for name, sh in self.outputs:
            if sh is None:
                lines.append("output %s" % name)
            else:
                lines.append("output %s" % self.ein_tref(name, self.labels_of[name], sh))
        return "\n".join(lines) + "\n"

    def reference(self):
        """NumPy statements computing every tensor, in order; outputs by name."""
        letters = {d: "abcdefghijklmnopqrstuvwxyz"[i] for i, d in enumerate(self.dims)}
        r = NpRender(letters)
        code = []
        for name, labels, _, _, terms in self.stmts:
            code.append("%s = %s" % (name, r.statement(labels, terms)))
        return code

    def case(self):
        self.finalize_sizes()
        if self.rng.random() < 0.12:
            # Override one dim, and sometimes one mesh axis, from the command line.
            self.overrides.append(self.rng.choice(self.dims))
            if self.rng.random() < 0.5:
                self.overrides.append(self.rng.choice(self.mesh)[0])
        all_sizes = dict(self.sizes)
        all_sizes.update(dict(self.mesh))
        mesh_size = 1
        for _, n in self.mesh:
            mesh_size *= n
        return {
            "name": self.name,
            "category": self.category,
            "dtype": self.dtype,
            "mesh": list(self.mesh),
            "mesh_size": mesh_size,
            "source": self.source(),
            "inputs": [(name, [self.sizes[d] for d in labels])
                       for _, name, labels, _ in self.decls],
            # i32 inputs: name -> the size of the dim their values index
            "int_inputs": {n: self.sizes[d] for n, d in self.int_inputs.items()},
            "reference": self.reference(),
            "letters": {d: "abcdefghijklmnopqrstuvwxyz"[i] for i, d in enumerate(self.dims)},
            "sizes": dict(self.sizes),
            "outputs": [name for name, _ in self.outputs],
            "defines": ["%s=%d" % (n, all_sizes[n]) for n in self.overrides],
            "flags": list(self.flags),
        }


def shuffled(rng, xs):
    xs = list(xs)
    rng.shuffle(xs)
    return xs


def fn_term(rng, inner_terms):
    """A call factor of a function defined everywhere (log, sqrt and rsqrt get
    positive arguments in t_elementwise)."""
    return Call(rng.choice(ELEMENTWISE_FUNCS), inner_terms)


# ---- templates, one per category --------------------------------------------

def t_unary(p, rng):
    """Reductions, transposes and relabels of one operand."""
    rank = rng.choice([1, 2, 3])
    dims = p.new_dims(rank)
    kind = rng.choice(["reduce", "transpose", "relabel", "scale"])
    if kind == "relabel" and rank >= 2:
        # A declared [I, J] with |I| = |J|, used as A[J, I].
        p.ties.append([dims[0], dims[1]])
        p.input("A", dims)
        used = [dims[1], dims[0]] + dims[2:]
        out = list(dims)
        p.stmt("T", out, [(1, [Ref("A", used)])], sharding=p.maybe_constraint(out, 0.4))
    else:
        p.input("A", dims)
        if kind == "reduce":
            keep = [d for d in dims if rng.random() < 0.5]
            out = shuffled(rng, keep)
        else:
            out = shuffled(rng, dims)
        if not out:
            # A full reduction to a rank-0 tensor.
            out = []
        terms = [(rng.choice([1, -1]), [Ref("A", dims)])]
        if kind == "scale":
            terms = [(1, [Num(rng.choice([2.0, 0.5, -3.0])), Ref("A", dims)])]
        p.stmt("T", out, terms, sharding=p.maybe_constraint(out, 0.4) if out else None)
    p.output("T", p.maybe_constraint(p.labels_of["T"], 0.3) if p.labels_of["T"] else None)


def t_binary(p, rng, batch=False):
    """Two-operand contractions (matmuls, outer products, dot products)."""
    nb = rng.choice([1, 2]) if batch else 0
    na, nbf, nc = rng.choice([0, 1, 1, 2]), rng.choice([0, 1, 1, 2]), rng.choice([0, 1, 1, 2])
    if na + nbf + nc + nb == 0:
        nc = 1
    b = p.new_dims(nb)
    fa, fb, c = p.new_dims(na), p.new_dims(nbf), p.new_dims(nc)
    a_labels = shuffled(rng, b + fa + c)
    b_labels = shuffled(rng, b + c + fb)
    out = shuffled(rng, b + fa + fb)
    if out and rng.random() < 0.15:
        out = out[:-1]  # also reduce a free dim away
    p.input("A", a_labels)
    p.input("B", b_labels)
    factors = [Ref("A", a_labels), Ref("B", b_labels)]
    if rng.random() < 0.2:
        factors.insert(rng.choice([0, 1, 2]), Num(rng.choice([0.5, 2.0, -1.0])))
    p.stmt("C", out, [(1, factors)], sharding=p.maybe_constraint(out, 0.35))
    p.output("C", p.maybe_constraint(out, 0.35) if out else None)


def t_three(p, rng):
    """D[i,l] = A[i,j] * B[j,k] * C[k,l] and batched or permuted variants."""
    nb = rng.choice([0, 0, 1])
    b = p.new_dims(nb)
    i, j, k, l = p.new_dims(4)
    la = shuffled(rng, b + [i, j]) if rng.random() < 0.3 else b + [i, j]
    lb = shuffled(rng, b + [j, k]) if rng.random() < 0.3 else b + [j, k]
    lc = shuffled(rng, b + [k, l]) if rng.random() < 0.3 else b + [k, l]
    p.input("A", la)
    p.input("B", lb)
    p.input("C", lc)
    out = b + ([i, l] if rng.random() < 0.7 else [l, i])
    p.stmt("D", out, [(1, [Ref("A", la), Ref("B", lb), Ref("C", lc)])],
           sharding=p.maybe_constraint(out, 0.3))
    p.output("D", p.maybe_constraint(out, 0.3))


def t_elementwise(p, rng):
    """Sums of terms, function calls, constants and broadcasting."""
    i, j = p.new_dims(2)
    p.input("A", [i, j])
    p.input("V", [j])
    p.input("U", [i])
    kind = rng.choice(["sum", "call", "broadcast", "positive", "nested", "const", "contract"])
    if kind == "sum":
        p.input("B", [i, j])
        terms = [(1, [Ref("A", [i, j])]), (rng.choice([1, -1]), [Num(2.0), Ref("B", [i, j])]),
                 (1, [Ref("A", [i, j]), Ref("B", [i, j])])]
    elif kind == "call":
        terms = [(1, [fn_term(rng, [(1, [Ref("A", [i, j])])])]),
                 (rng.choice([1, -1]), [Ref("V", [j])])]
    elif kind == "broadcast":
        terms = [(1, [Ref("U", [i]), Ref("V", [j])]), (-1, [Ref("A", [i, j])]),
                 (1, [Num(0.25), Ref("V", [j])])]
    elif kind == "positive":
        # log, sqrt, rsqrt of A*A + 1 (> 0 for any input).
        inner = [(1, [Ref("A", [i, j]), Ref("A", [i, j])]), (1, [Num(1.0)])]
        terms = [(1, [Call(rng.choice(POSITIVE_FUNCS), inner)]),
                 (1, [Ref("U", [i])])]
    elif kind == "nested":
        inner = [(1, [Ref("A", [i, j])]), (1, [Ref("V", [j])])]
        terms = [(1, [Ref("U", [i]), fn_term(rng, inner)]),
                 (1, [Paren([(1, [Ref("A", [i, j])]), (-1, [Num(0.5)])]), Ref("V", [j])])]
    elif kind == "const":
        terms = [(1, [Num(3.0), Ref("A", [i, j])]), (1, [Num(1.5)])]
    else:
        # A summed term next to an elementwise one: T[i] = sum_j A*V + U.
        p.stmt("S", [i], [(1, [Ref("A", [i, j]), Ref("V", [j])]), (1, [Ref("U", [i])]),
                          (-1, [fn_term(rng, [(1, [Ref("A", [i, j])])])])],
               sharding=p.maybe_constraint([i], 0.3))
        p.output("S", p.maybe_constraint([i], 0.3))
        return
    p.stmt("E", [i, j], terms, sharding=p.maybe_constraint([i, j], 0.4))
    p.output("E", p.maybe_constraint([i, j], 0.3))


def t_vocab(p, rng):
    """Division, maximum/minimum/abs, comparisons in where, index values and
    -inf masks (docs/language.md), on sharded dims: an index value is the
    global position, so masks must agree on every shard."""
    kind = rng.choice(["mask", "minmax", "index", "cmp", "div_summed", "eq"])
    if kind == "mask":
        b, t, s = p.new_dims(3)
        p.input("L", [b, t, s])
        m = Where("<=", [(1, [Idx(s)])], [(1, [Idx(t)])], [(1, [Ref("L", [b, t, s])])],
                  [(-1, [Num(float("inf"))])])
        p.stmt("M", [b, t, s], [(1, [m])], sharding=p.maybe_constraint([b, t, s], 0.5))
        # exp(-inf) = 0: the output is finite, the masked entries exactly 0.
        e = Call("exp", [(1, [Ref("M", [b, t, s])]), (-1, [Num(1.0)])])
        p.stmt("E", [b, t, s], [(1, [e, Div(Paren([(1, [Call("abs", [(1, [Ref("L", [b, t, s])])])]),
                                                   (1, [Num(1.0)])]))])],
               sharding=p.maybe_constraint([b, t, s], 0.4))
        p.output("E", p.maybe_constraint([b, t, s], 0.3))
        return
    i, j = p.new_dims(2)
    p.input("A", [i, j])
    p.input("V", [j])
    p.input("U", [i])
    if kind == "minmax":
        terms = [(1, [Call2("maximum", [(1, [Ref("A", [i, j])])], [(1, [Ref("V", [j])])])]),
                 (-1, [Call2("minimum", [(1, [Ref("A", [i, j])])],
                                         [(1, [Num(0.5), Ref("U", [i])])])]),
                 (1, [Call("abs", [(1, [Ref("A", [i, j])])]), Div(Num(4.0))])]
    elif kind == "index":
        terms = [(1, [Ref("A", [i, j]), Idx(i), Div(Paren([(1, [Idx(j)]), (1, [Num(1.0)])]))]),
                 (1, [Where(">", [(1, [Idx(i)])], [(1, [Idx(j)])], [(1, [Num(1.0)])],
                            [(1, [Ref("V", [j])])])])]
    elif kind == "cmp":
        op = rng.choice(["<", "<=", ">", ">=", "!="])
        terms = [(1, [Where(op, [(1, [Ref("A", [i, j])])], [(1, [Ref("V", [j])])],
                            [(1, [Ref("A", [i, j])])], [(1, [Ref("U", [i]), Num(2.0)])])])]
    elif kind == "div_summed":
        # A divisor and an index value inside a contraction over j.
        pos = Paren([(1, [Ref("V", [j]), Ref("V", [j])]), (1, [Num(1.0)])])
        p.stmt("S", [i], [(1, [Ref("A", [i, j]), Div(pos)]), (1, [Ref("A", [i, j]), Idx(j),
                                                                 Div(Num(8.0))])],
               sharding=p.maybe_constraint([i], 0.4))
        p.output("S", p.maybe_constraint([i], 0.3))
        return
    else:
        # The diagonal of a square: where(i == j, A, 0).
        p.ties.append([i, j])
        terms = [(1, [Where("==", [(1, [Idx(i)])], [(1, [Idx(j)])], [(1, [Ref("A", [i, j])])],
                            [(1, [Num(0.0)])])]), (1, [Ref("U", [i]), Div(Num(2.0))])]
    p.stmt("E", [i, j], terms, sharding=p.maybe_constraint([i, j], 0.4))
    p.output("E", p.maybe_constraint([i, j], 0.3))


def t_reduce(p, rng):
    """max / min / sum / mean over a named index and softmax, over dims the
    mesh may shard: partial maxima then need an AllReduce with max."""
    kind = rng.choice(["softmax", "masked_softmax", "reduce", "reduce_then_use", "big_logits"])
    b, t, s = p.new_dims(3)
    p.input("L", [b, t, s])
    if kind in ("softmax", "big_logits"):
        # Logits up to 1e4 in magnitude: only the stable form stays finite.
        scale = 1e4 if kind == "big_logits" else rng.choice([1.0, 3.0])
        inner = [(1, [Num(scale), Ref("L", [b, t, s])])]
        p.stmt("P", [b, t, s], [(1, [Softmax(inner, rng.choice([s, t]))])],
               sharding=p.maybe_constraint([b, t, s], 0.5))
        p.output("P", p.maybe_constraint([b, t, s], 0.3))
        return
    if kind == "masked_softmax":
        m = Where("<=", [(1, [Idx(s)])], [(1, [Idx(t)])], [(1, [Ref("L", [b, t, s])])],
                  [(-1, [Num(float("inf"))])])
        p.stmt("M", [b, t, s], [(1, [m])], sharding=p.maybe_constraint([b, t, s], 0.5))
        p.stmt("P", [b, t, s], [(1, [Softmax([(1, [Ref("M", [b, t, s])])], s)])],
               sharding=p.maybe_constraint([b, t, s], 0.4))
        p.output("P", p.maybe_constraint([b, t, s], 0.3))
        return
    fn = rng.choice(["max", "min", "sum", "mean"])
    dim = rng.choice([b, t, s])
    keep = [d for d in [b, t, s] if d != dim]
    if kind == "reduce":
        p.stmt("R", keep, [(1, [Red(fn, [(1, [Ref("L", [b, t, s])])], dim)])],
               sharding=p.maybe_constraint(keep, 0.4))
    else:
        # The reduction feeds a broadcast difference and a second reduction.
        p.stmt("R", [b, t, s], [(1, [Ref("L", [b, t, s])]),
                                (-1, [Red(fn, [(1, [Ref("L", [b, t, s])])], dim)])],
               sharding=p.maybe_constraint([b, t, s], 0.4))
        p.stmt("Q", keep, [(1, [Red(rng.choice(["max", "min"]), [(1, [Ref("R", [b, t, s])])], dim)])],
               sharding=p.maybe_constraint(keep, 0.3))
        p.output("Q", p.maybe_constraint(keep, 0.3))
    p.output("R", p.maybe_constraint(p.labels_of["R"], 0.3))


def t_gather(p, rng):
    """Embedding lookups: i32 ids and a table, each randomly sharded (a
    table sharded on its rows is Megatron's vocab-parallel embedding), the
    lookup used alone, scaled, summed over an ids dim, or as a GEMM operand."""
    b, t, v, d = p.new_dims(4)
    ids = [b, t] if rng.random() < 0.7 else [b]
    p.index_input("Tok", ids, v)
    p.input("Emb", [v, d])
    g = Gather("Emb", v, "Tok", ids, [d])
    kind = rng.choice(["plain", "scaled", "summed", "matmul"])
    if kind == "plain":
        p.stmt("E", ids + [d], [(1, [g])], sharding=p.maybe_constraint(ids + [d], 0.4))
    elif kind == "scaled":
        p.stmt("E", ids + [d], [(1, [Num(2.0), g]), (1, [Num(1.0)])],
               sharding=p.maybe_constraint(ids + [d], 0.4))
    elif kind == "summed":
        p.stmt("E", [b, d], [(1, [g])], sharding=p.maybe_constraint([b, d], 0.4))
    else:
        f = p.new_dims(1)[0]
        p.input("W", [d, f])
        p.stmt("E", ids + [f], [(1, [g, Ref("W", [d, f])])],
               sharding=p.maybe_constraint(ids + [f], 0.4))
    p.output("E", p.maybe_constraint(p.labels_of["E"], 0.3))


def t_chain(p, rng):
    """Multi-statement programs with constraints on left sides and outputs."""
    b, d, f = p.new_dims(3)
    p.input("In", [b, d])
    p.input("W1", [d, f])
    p.input("W2", [f, d])
    kind = rng.choice(["ffw", "ffw_gated", "ffw_bias", "two_outputs"])
    h_sh = p.random_sharding([b, f], p=0.7)
    if kind == "ffw":
        p.stmt("H", [b, f], [(1, [Ref("In", [b, d]), Ref("W1", [d, f])])], sharding=h_sh)
        p.stmt("G", [b, f], [(1, [fn_term(rng, [(1, [Ref("H", [b, f])])])])],
               sharding=p.maybe_constraint([b, f], 0.5))
        p.stmt("Out", [b, d], [(1, [Ref("G", [b, f]), Ref("W2", [f, d])])],
               sharding=p.maybe_constraint([b, d], 0.3))
        p.output("Out", p.maybe_constraint([b, d], 0.6))
    elif kind == "ffw_gated":
        p.input("W3", [d, f])
        p.stmt("H1", [b, f], [(1, [Ref("In", [b, d]), Ref("W1", [d, f])])], sharding=h_sh)
        p.stmt("H3", [b, f], [(1, [Ref("In", [b, d]), Ref("W3", [d, f])])],
               sharding=p.maybe_constraint([b, f], 0.5))
        p.stmt("G", [b, f], [(1, [Call("silu", [(1, [Ref("H1", [b, f])])]), Ref("H3", [b, f])])])
        p.stmt("Out", [b, d], [(1, [Ref("G", [b, f]), Ref("W2", [f, d])])])
        p.output("Out", p.maybe_constraint([b, d], 0.6))
    elif kind == "ffw_bias":
        p.input("Bias", [f])
        p.stmt("H", [b, f], [(1, [Ref("In", [b, d]), Ref("W1", [d, f])]), (1, [Ref("Bias", [f])])],
               sharding=h_sh)
        p.stmt("Out", [b, d], [(1, [Call("relu", [(1, [Ref("H", [b, f])])]), Ref("W2", [f, d])])])
        p.output("Out", p.maybe_constraint([b, d], 0.6))
    else:
        p.stmt("H", [b, f], [(1, [Ref("In", [b, d]), Ref("W1", [d, f])])], sharding=h_sh)
        p.stmt("Out", [b, d], [(1, [Ref("H", [b, f]), Ref("W2", [f, d])]),
                               (1, [Ref("In", [b, d])])])
        p.output("H", p.maybe_constraint([b, f], 0.5))
        p.output("Out", p.maybe_constraint([b, d], 0.5))


def t_unreduced(p, rng):
    """`{U_X}` intermediates: a contraction left as partial sums over an axis
    that shards its contracting dim (seed 001, "unreduced" notation), then
    used linearly (carried) or not (reduced first)."""
    axes = [a for a, n in p.mesh]
    x = rng.choice(axes)
    i, j, k, l = p.new_dims(4)
    a_sh = p.random_sharding([i], avoid=(x,))
    a_sh[j] = x
    b_sh = p.random_sharding([k], avoid=(x,) + tuple(a_sh[i]))
    b_sh[j] = x if rng.random() < 0.7 else ""
    p.input("A", [i, j], a_sh)
    p.input("B", [j, k], b_sh)
    used = set(x)
    p_sh = {i: "", k: ""}
    for a in axes:
        if a not in used and rng.random() < 0.4:
            p_sh[rng.choice([i, k])] += a
    p.stmt("P", [i, k], [(1, [Ref("A", [i, j]), Ref("B", [j, k])])], sharding=p_sh,
           unreduced=[x])
    kind = rng.choice(["carry", "carry", "reduce", "add"])
    if kind == "carry":
        p.input("C", [k, l])
        p.stmt("Q", [i, l], [(1, [Ref("P", [i, k]), Ref("C", [k, l])])])
        p.output("Q", p.maybe_constraint([i, l], 0.5))
    elif kind == "reduce":
        p.stmt("Q", [i, k], [(1, [Call(rng.choice(ELEMENTWISE_FUNCS), [(1, [Ref("P", [i, k])])])])])
        p.output("Q", p.maybe_constraint([i, k], 0.5))
    else:
        p.input("R", [i, k])
        p.stmt("Q", [i, k], [(1, [Ref("P", [i, k])]), (1, [Ref("R", [i, k])])])
        p.output("Q", p.maybe_constraint([i, k], 0.5))


def t_mixed(p, rng):
    """Operands sharded differently meet in one op: elementwise sums of
    tensors with different shardings, sharded broadcasts, a tensor used twice
    (a Gram matrix), an intermediate with several consumers that want
    different shardings, and reductions over sharded dims."""
    kind = rng.choice(["ew", "gram", "multiuse", "reduce"])
    if kind == "ew":
        i, j, k = p.new_dims(3)
        p.input("A", [i, j])
        p.input("B", [j, i])
        p.input("U", [i])
        p.input("T", [i, j, k])
        terms = [(1, [Ref("A", [i, j])]), (-1, [Ref("B", [j, i]), Ref("U", [i])]),
                 (1, [Call(rng.choice(ELEMENTWISE_FUNCS), [(1, [Ref("B", [j, i])])])])]
        p.stmt("E", [i, j], terms, sharding=p.maybe_constraint([i, j], 0.5))
        # A reduction of T next to elementwise terms.
        p.stmt("F", [j, i], [(1, [Ref("T", [i, j, k])]), (1, [Ref("E", [i, j])])],
               sharding=p.maybe_constraint([j, i], 0.5))
        p.output("E", p.maybe_constraint([i, j], 0.5))
        p.output("F", p.maybe_constraint([j, i], 0.5))
    elif kind == "gram":
        i, j = p.new_dims(2)
        p.ties.append([i])
        p.input("A", [i, j])
        # G[i, i'] = sum_j A[i, j] A[i', j], with i' a dim of the same size as i.
        (i2,) = p.new_dims(1)
        p.ties[-1].append(i2)
        p.stmt("G", [i, i2], [(1, [Ref("A", [i, j]), Ref("A", [i2, j])])],
               sharding=p.maybe_constraint([i, i2], 0.5))
        p.output("G", p.maybe_constraint([i, i2], 0.5))
    elif kind == "multiuse":
        i, j, k = p.new_dims(3)
        p.input("A", [i, j])
        p.input("B", [j, k])
        p.input("C", [k, j])
        p.stmt("H", [i, k], [(1, [Ref("A", [i, j]), Ref("B", [j, k])])],
               sharding=p.maybe_constraint([i, k], 0.5))
        p.stmt("P", [i, j], [(1, [Ref("H", [i, k]), Ref("C", [k, j])])],
               sharding=p.random_sharding([i, j]))
        p.stmt("Q", [k, i], [(1, [Call("tanh", [(1, [Ref("H", [i, k])])])])],
               sharding=p.random_sharding([k, i]))
        p.stmt("R", [i], [(1, [Ref("H", [i, k])])], sharding=p.maybe_constraint([i], 0.5))
        p.output("P", p.maybe_constraint([i, j], 0.5))
        p.output("Q", p.maybe_constraint([k, i], 0.5))
        p.output("R", p.maybe_constraint([i], 0.5))
        p.output("H", p.maybe_constraint([i, k], 0.5))
    else:
        dims = p.new_dims(rng.choice([2, 3]))
        sh = p.random_sharding(dims, p=0.9)
        p.input("A", dims, sh)
        keep = [d for d in dims if not sh[d]] or dims[:1]
        keep = shuffled(rng, keep)
        p.stmt("S", keep, [(1, [Num(2.0), Ref("A", dims)])],
               sharding=p.maybe_constraint(keep, 0.5))
        p.output("S", p.maybe_constraint(keep, 0.5))


def t_random(p, rng):
    """A random dataflow graph: 3 to 5 statements, each a contraction or an
    elementwise combination of earlier tensors, with random constraints and
    several outputs.  Functions here grow at most linearly (no exp), so long
    chains stay finite."""
    dims = p.new_dims(rng.choice([3, 4, 5]))
    names = []
    for n in range(rng.choice([2, 3])):
        labels = rng.sample(dims, rng.choice([1, 2, 2, 3]))
        name = "In%d" % n
        p.input(name, labels)
        names.append(name)
    bounded = ["tanh", "relu", "gelu", "silu", "sigmoid", "neg"]
    for n in range(rng.choice([3, 4, 5])):
        a = rng.choice(names)
        b = rng.choice(names)
        la, lb = p.labels_of[a], p.labels_of[b]
        union = list(dict.fromkeys(la + lb))
        name = "T%d" % n
        if union and rng.random() < 0.5:
            # A contraction: keep a random subset of the union (at most 4 dims).
            k = rng.randint(0 if len(union) > 1 else 1, min(4, len(union)))
            out = rng.sample(union, k)
            factors = [Ref(a, la), Ref(b, lb)] if a != b or rng.random() < 0.5 else [Ref(a, la)]
            terms = [(1, factors)]
        else:
            # Elementwise: every index kept, so nothing is summed.
            if len(union) > 4:
                b, lb, union = a, la, list(la)
            out = shuffled(rng, union)
            terms = [(1, [Call(rng.choice(bounded), [(1, [Ref(a, la)])])]),
                     (rng.choice([1, -1]), [Num(rng.choice([0.5, 2.0])), Ref(b, lb)])]
        p.stmt(name, out, terms, sharding=p.maybe_constraint(out, 0.4) if out else None)
        names.append(name)
    last = names[-1]
    p.output(last, p.maybe_constraint(p.labels_of[last], 0.4) if p.labels_of[last] else None)
    for name in names[-4:-1]:
        if name.startswith("T") and rng.random() < 0.5:
            p.output(name, p.maybe_constraint(p.labels_of[name], 0.4)
                     if p.labels_of[name] else None)


def t_meshslice(p, rng):
    """2D GEMMs C[M,N] = A[M,K] B[K,N] on a 2D mesh with every matrix
    2D-sharded (seed 004 3.2.1), in layouts that make each of A, B, C the
    stationary one or none, sometimes stored transposed, then an elementwise
    consumer.  The meshslice pass lowers such GEMMs to loops of partial
    collectives (docs/meshslice.md); half the cases force the slice count K
    with --meshslice=K (sizes are multiples of 16 K), the rest use auto."""
    m, k, n = p.new_dims(3)
    ax = [a for a, _ in p.mesh]
    x, y = (ax[0], ax[1]) if rng.random() < 0.5 else (ax[1], ax[0])

    def two_d(r, c):
        # rows over one axis, columns over the other, in either assignment
        return {r: x, c: y} if rng.random() < 0.7 else {r: y, c: x}
    a_l = [m, k] if rng.random() < 0.8 else [k, m]
    b_l = [k, n] if rng.random() < 0.8 else [n, k]
    p.input("A", a_l, two_d(m, k) if a_l[0] == m else two_d(k, m))
    p.input("B", b_l, two_d(k, n) if b_l[0] == k else two_d(n, k))
    c_sh = two_d(m, n)
    p.stmt("C", [m, n], [(1, [Ref("A", a_l), Ref("B", b_l)])], sharding=c_sh)
    # Comparable M, K, N of a few dozen or more, so that propagate's plan is
    # the 2D one (tiny M or N would make moving the other operand cheaper).
    kk = 1
    if rng.random() < 0.5:
        kk = rng.choice([1, 2, 4])
        p.flags.append("--meshslice=%d" % kk)
    for d in (m, k, n):
        p.multiple[d] = 16 * kk
    if rng.random() < 0.5:
        p.input("Bias", [n])
        p.stmt("D", [m, n], [(1, [Call("gelu", [(1, [Ref("C", [m, n])]),
                                                 (1, [Ref("Bias", [n])])])])])
        p.output("D", p.maybe_constraint([m, n], 0.5))
    else:
        p.output("C", p.maybe_constraint([m, n], 0.5))


CATEGORIES = [
    # (category, template, count, mesh ranks to draw from)
    ("unary", t_unary, 35, [1, 2, 3]),
    ("binary", lambda p, r: t_binary(p, r, False), 50, [1, 2, 3]),
    ("batch", lambda p, r: t_binary(p, r, True), 30, [1, 2, 3]),
    ("three", t_three, 25, [1, 2, 3]),
    ("elementwise", t_elementwise, 35, [1, 2]),
    ("chain", t_chain, 30, [1, 2, 3]),
    ("unreduced", t_unreduced, 20, [1, 2, 3]),
    ("mixed", t_mixed, 40, [1, 2, 3]),
    ("random", t_random, 60, [1, 2, 3]),
    ("meshslice", t_meshslice, 30, ["2d"]),
    ("vocab", t_vocab, 40, [1, 2, 3]),
    ("reduce", t_reduce, 40, [1, 2, 3]),
    ("gather", t_gather, 30, [1, 2, 3]),
]


def generate(seed=20251122):
    """All cases, deterministic for a given seed (list of dicts, see Program.case)."""
    cases = []
    for cat, template, count, ranks in CATEGORIES:
        for n in range(count):
            # One generator per case, so editing one category leaves the others' cases unchanged.
            rng = random.Random("%d/%s/%d" % (seed, cat, n))
            rank = rng.choice(ranks)
            # "2d": a 2D mesh with two axes of size > 1 (MeshSlice needs a grid).
            mesh = rng.choice(MESHES[2][:3] if rank == "2d" else MESHES[rank])
            r = rng.random()
            dtype = "f64" if r < 0.25 else "bf16" if r < 0.35 else "f32"
            p = Program(rng, "%s_%03d" % (cat, n), cat, mesh, dtype)
            template(p, rng)
            cases.append(p.case())
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=20251122)
    ap.add_argument("--list", action="store_true", help="print one line per case")
    ap.add_argument("--show", metavar="NAME", help="print a case's source and NumPy reference")
    a = ap.parse_args()
    cases = generate(a.seed)
    if a.show:
        for c in cases:
            if c["name"] == a.show:
                sys.stdout.write(c["source"])
                print("# NumPy reference:")
                for line in c["reference"]:
                    print("#   " + line)
                return 0
        print("no case named %s" % a.show, file=sys.stderr)
        return 1
    counts = {}
    for c in cases:
        counts[c["category"]] = counts.get(c["category"], 0) + 1
        if a.list:
            print("%-16s %s mesh=%s" % (c["name"], c["dtype"],
                                       "x".join(str(n) for _, n in c["mesh"])))
    print("%d cases: %s" % (len(cases), ", ".join("%s %d" % kv for kv in counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
