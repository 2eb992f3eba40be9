// radial_cases.h: every layer's radial MLP of a model (MACE: radial_mlp; NequIP: the edge MLP), described for the
// radial tables (kernels/cpu/radial_spline.h), with the reference last hidden layer from the CPU steps' functions.
#pragma once

#include <cstring>
#include <functional>
#include <vector>

extern "C" {
#include "kernels/cpu/fcnet.h"
#include "kernels/cpu/radial.h"
#include "kernels/cpu/radial_spline.h"
#include "kernels/nequip_steps.h"
}

namespace cgqtest {

struct RadialCase {
    int layer;
    cgq_radial_mlp rm;
    std::function<void(double, double *)> hidden;  // the last hidden layer at r, as the CPU steps compute it
    double lo;     // smallest r the checks use (MACE: 0.3 Å; NequIP: x = r / r_max 0.05)
    double alpha;  // the last layer's scale: w = alpha a W_last
};

// mlps: the model's MLPs (cgq_radial_mlps_of), which the cases point into
inline std::vector<RadialCase> radial_cases(const cgq_model *m, cgq_radial_mlps &mlps) {
    std::vector<RadialCase> out;
    cgq_radial_mlps_of(m, &mlps);
    if (m->nequip) {
        const cgq_nequip *nq = m->nequip;
        for (int t = 0; t < nq->n_layers; t++) {
            const cgq_nq_mlp *f = &nq->layers[t].edge_mlp;
            auto hidden = [nq, f](double x, double *a) {
                std::vector<double> ef(nq->n_bessel), out(f->h[f->n_layers]), cache(nq_mlp_cache_size(f));
                nq_edge_embedding(nq, x, ef.data(), nullptr);
                nq_mlp_forward(f, ef.data(), out.data(), cache.data());
                const int W = f->h[f->n_layers - 1];
                std::copy(cache.end() - W, cache.end(), a);
            };
            out.push_back({t, mlps.rm[t], hidden, 0.05, mlps.alpha[t]});
        }
        return out;
    }
    for (int t = 0; t < m->n_layers; t++) {
        const cgq_fcnet *fc = &m->layers[t].radial_mlp;
        auto hidden = [m, fc](double r, double *a) {
            std::vector<double> x(m->n_bessel), out(fc->h[fc->n_layers]), cache(cgq_fcnet_cache_size(fc));
            cgq_bessel(m, r, x.data(), nullptr); /* as mace_step_edge_geometry */
            const double cut = cgq_poly_cutoff(m->cutoff_p, m->cutoff_r_max, r, nullptr);
            if (m->apply_cutoff)
                for (double &v : x) v *= cut;
            cgq_fcnet_forward(fc, x.data(), out.data(), cache.data());
            const int W = fc->h[fc->n_layers - 1];
            std::copy(cache.end() - W, cache.end(), a);
        };
        out.push_back({t, mlps.rm[t], hidden, 0.3, mlps.alpha[t]});
    }
    return out;
}

}  // namespace cgqtest
