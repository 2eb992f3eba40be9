/* model_describe.c: the human-readable summary printed by `cgequi info`. */
#include <stdio.h>

#include "model/model.h"
#include "model/nequip.h"

static const char *symbol(int z) {
    static const char *s[] = {"X", "H", "He", "Li", "Be", "B", "C", "N", "O", "F", "Ne", "Na", "Mg", "Al", "Si", "P",
                              "S", "Cl", "Ar", "K", "Ca", "Sc", "Ti", "V", "Cr", "Mn", "Fe", "Co", "Ni", "Cu", "Zn",
                              "Ga", "Ge", "As", "Se", "Br", "Kr"};
    return z > 0 && z < (int)(sizeof s / sizeof s[0]) ? s[z] : "";
}

void cgq_model_describe(const cgq_model *m, char *buf, size_t size) {
    if (m && m->nequip) {
        cgq_nequip_describe(m, buf, size);
        return;
    }
    size_t pos = 0;
#define OUT(...) pos += (size_t)snprintf(buf + (pos < size ? pos : size), pos < size ? size - pos : 0, __VA_ARGS__)
    OUT("family       %s (%s), head '%s'\n", m->family, m->model_class, m->head);
    OUT("source       %s\n", m->source);
    OUT("cutoff       %.6g A\n", m->r_max);
    OUT("species      %d:", m->n_species);
    for (int i = 0; i < m->n_species; i++) OUT(" %s(Z=%d)", symbol(m->species_z[i]), m->species_z[i]);
    OUT("\nradial       %d Bessel functions, polynomial cutoff p=%g%s\n", m->n_bessel, m->cutoff_p,
        m->apply_cutoff ? "" : " (applied to weights)");
    OUT("sph. harm.   l <= %d\n", m->lmax_sh);
    OUT("energy       scale %.10g, shift %.10g\n", m->scale, m->shift);
    for (int t = 0; t < m->n_layers; t++) {
        const cgq_mace_layer *ly = &m->layers[t];
        char a[512], b[512];
        cgq_irreps_format(&ly->linear_up.in, a, sizeof a);
        cgq_irreps_format(&ly->product_linear.out, b, sizeof b);
        int corr = ly->n_contractions ? ly->contractions[0].correlation : 0;
        OUT("layer %d      %s%s interaction, %s -> %s, correlation %d, radial MLP", t,
            ly->density ? "density " : "", ly->residual ? "residual" : "non-residual", a, b, corr);
        for (int k = 0; k <= ly->radial_mlp.n_layers; k++) OUT("%s%d", k ? "-" : " ", ly->radial_mlp.h[k]);
        OUT(", avg neighbours %.6g\n", ly->avg_num_neighbors);
    }
    for (int r = 0; r < m->n_readouts; r++)
        OUT("readout %d    %s on layer %d\n", r, m->readouts[r].kind == 0 ? "linear" : "non-linear", m->readouts[r].layer);
#undef OUT
}
