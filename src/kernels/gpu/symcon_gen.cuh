/* symcon_gen.cuh: the product basis's kernels generated for one layer's monomials (compiled by rtc.cuh).
 *
 * k_symcon_fwd / k_symcon_bwd read each monomial's code at run time: its factors' A values from shared memory, the
 * prefix changes of the nested sums by tests on the code, and in the reverse dE/dA by read-modify-writes in shared
 * memory (what bounds it: gpu.md, "The product basis"). The monomials are fixed by the model, so the generated kernels
 * have them as constants: the channel's A values and dE/dA sums are registers, the nested sums straight-line code, and
 * what is left per monomial is its coefficient's load and one FMA per node (two in the reverse). They do the same
 * operations in the same order as the generic kernels (symcon_nested, padding monomials aside: their coefficients
 * are zero), so the results are the same bits; the test ProductBasisGeneratedIsGenericBitwise checks that.
 * The source includes symcon.cuh's own text (CMake's cgq_generated/symcon_source.h), for the item logic and the
 * argument structs: the launch passes the generic kernels' arguments unchanged. */
#ifndef CGQ_GPU_SYMCON_GEN_CUH
#define CGQ_GPU_SYMCON_GEN_CUH

#include <string>
#include <vector>

#if !defined(__HIPCC__)
#include "cgq_generated/symcon_source.h"
#endif

/* Appends printf-formatted text to s */
static void gen_printf(std::string *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void gen_printf(std::string *s, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0) s->append(buf, (size_t)std::min(n, (int)sizeof buf - 1));
}

/* One layer's kernels: the shape of the launch they are made for, and the monomials */
struct symcon_gen_in {
    const symcon_args *a;
    const std::vector<int32_t> *codes; /* the plan's, padded (a padding entry repeats the code before it) */
    int nf, nb, g, block_threads;      /* factors, nodes per item and per group, threads per block */
    bool dbl;                          /* double operands (else float) */
};

/* The statements of component range [q0, q1)'s nested sums (symcon_nested, unrolled on the codes): acc[p][k], the
 * node's A values x[i][k] (x[D] = 1), coefficient q at tc[q * C]; rev: the reverse's pp[p][k] and ga[i][k] too */
static void gen_symcon_range(std::string *s, const symcon_gen_in &in, int q0, int q1, bool rev) {
    const std::vector<int32_t> &codes = *in.codes;
    const int NF = in.nf, D = in.a->D, C = in.a->C;
    auto f = [](int32_t code, int p) { return symcon_factor(code, p); };
    auto changed_above = [](int32_t diff, int p) { return (diff >> (SYMCON_IDX_BITS * (p + 1))) != 0; };
    /* the prefix's level p ends into level p + 1 (rev: dE/dA of the level's factor first, as symcon_add) */
    auto end_level = [&](int32_t code, int p) {
        const int i = f(code, p + 1);
        if (rev && i != D) gen_printf(s, "F ga[%d][k] = fma(pp[%d][k], acc[%d][k], ga[%d][k]);\n", i, p + 1, p, i);
        gen_printf(s, "F acc[%d][k] = fma(x[%d][k], acc[%d][k], acc[%d][k]);\n", p + 1, i, p, p + 1);
        gen_printf(s, "F acc[%d][k] = 0;\n", p);
    };
    int32_t prev = codes[(size_t)q0];
    s->append("F { ");
    for (int p = 0; p < NF; p++) gen_printf(s, "acc[%d][k] = 0; ", p);
    if (rev) {
        gen_printf(s, "pp[%d][k] = g[k]; ", NF - 1);
        for (int p = NF - 2; p >= 0; p--) gen_printf(s, "pp[%d][k] = pp[%d][k] * x[%d][k]; ", p, p + 1, f(prev, p + 1));
    }
    s->append("}\n");
    for (int q = q0; q < q1; q++) {
        const int32_t code = codes[(size_t)q];
        if (q > q0 && code == codes[(size_t)q - 1]) continue; /* padding: a zero coefficient */
        const int32_t diff = code ^ prev;
        if (diff >> SYMCON_IDX_BITS) {
            for (int p = 0; p + 1 < NF; p++)
                if (changed_above(diff, p)) end_level(prev, p);
            if (rev)
                for (int p = NF - 2; p >= 0; p--)
                    if (changed_above(diff, p))
                        gen_printf(s, "F pp[%d][k] = pp[%d][k] * x[%d][k];\n", p, p + 1, f(code, p + 1));
            prev = code;
        }
        const int i0 = f(code, 0);
        gen_printf(s, "{ const T c = __ldg(tc + %lld); F acc[0][k] = fma(c, x[%d][k], acc[0][k]);", (long long)q * C,
                   i0);
        if (rev && i0 != D) gen_printf(s, " F ga[%d][k] = fma(pp[0][k], c, ga[%d][k]);", i0, i0);
        s->append(" }\n");
    }
    for (int p = 0; p + 1 < NF; p++) end_level(prev, p);
}

/* The source of the layer's kernel `name` (forward, or rev: the reverse), with k_symcon_fwd's / k_symcon_bwd's
 * arguments */
static std::string symcon_gen_source(const symcon_gen_in &in, bool rev, const std::string &name) {
    const symcon_args &a = *in.a;
    std::string s;
    s += "typedef int int32_t;\ntypedef long long int64_t;\ntypedef unsigned long long uint64_t;\n";
#if !defined(__HIPCC__)
    s += cgq_symcon_cuh_source;
#endif
    gen_printf(&s, "\n#define T %s\n#define F _Pragma(\"unroll\") for (int k = 0; k < %d; k++)\n",
               in.dbl ? "double" : "float", in.nb);
    gen_printf(&s, "extern \"C\" __global__ void __launch_bounds__(%d) %s(symcon_args a, symcon_groups gp, "
                   "const T *coef, const int32_t *species, const T *A, int64_t lda, ",
               in.block_threads, name.c_str());
    s += rev ? "const T *gB, int64_t ldgb, T *gA, int64_t ldga) {\n" : "T *B, int64_t ldb) {\n";
    gen_printf(&s, "const symcon_thread th = symcon_this_thread();\nconst int ch = th.ch;\nint64_t node[%d];\nint elem;\n",
               in.nb);
    gen_printf(&s, "if (ch >= %d || !symcon_item_nodes<%d, %d>(gp, a.agnostic, species, th.item, node, &elem)) return;\n",
               a.C, in.nb, in.g);
    gen_printf(&s, "T x[%d][%d], acc[%d][%d];\n", a.D + 1, in.nb, in.nf, in.nb);
    if (rev) gen_printf(&s, "T pp[%d][%d], ga[%d][%d], g[%d];\n", in.nf, in.nb, a.D, in.nb, in.nb);
    for (int i = 0; i < a.D; i++) {
        gen_printf(&s, "F x[%d][k] = node[k] >= 0 ? A[node[k] * lda + %d + ch * %d] : (T)0;\n", i, a.a_off[i],
                   a.a_stride[i]);
        if (rev) gen_printf(&s, "F ga[%d][k] = 0;\n", i);
    }
    gen_printf(&s, "F x[%d][k] = 1;\n", a.D);
    gen_printf(&s, "const T *tc = coef + (size_t)elem * %lld + ch;\n", (long long)a.n_mono * a.C);
    for (int j = 0; j < a.n_blocks; j++) {
        const symcon_block &bk = a.blk[j];
        for (int m = 0; m < bk.dm; m++) {
            const int q0 = bk.mstart[m], q1 = bk.mstart[m + 1];
            gen_printf(&s, "/* block %d, component %d */\n", j, m);
            if (!rev) {
                if (q1 > q0) gen_symcon_range(&s, in, q0, q1, false);
                const std::string out = q1 > q0 ? "acc[" + std::to_string(in.nf - 1) + "][k]" : "(T)0";
                gen_printf(&s, "F if (node[k] >= 0) B[node[k] * ldb + %d + ch * %d] = %s;\n", bk.out_off + m, bk.dm,
                           out.c_str());
                continue;
            }
            if (q1 == q0) continue;
            gen_printf(&s, "{ bool any = false;\nF { g[k] = node[k] >= 0 ? gB[node[k] * ldgb + %d + ch * %d] : (T)0; "
                           "any = any || g[k] != (T)0; }\nif (any) {\n",
                       bk.out_off + m, bk.dm);
            gen_symcon_range(&s, in, q0, q1, true);
            s += "} }\n";
        }
    }
    if (rev)
        for (int i = 0; i < a.D; i++)
            gen_printf(&s, "F if (node[k] >= 0) gA[node[k] * ldga + %d + ch * %d] = ga[%d][k];\n", a.a_off[i],
                       a.a_stride[i], i);
    s += "}\n";
    return s;
}

#endif
