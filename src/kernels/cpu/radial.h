/* radial.h: MACE Bessel basis and polynomial cutoff envelope with derivatives in r. */
#ifndef CGQ_CPU_RADIAL_H
#define CGQ_CPU_RADIAL_H
#include "kernels/portable.h"
#include "model/model.h"
/* B[n] = prefactor sin(w_n r)/r and dB[n] = dB/dr (dB may be NULL). */
CGQ_FN void cgq_bessel(const cgq_model *m, double r, double *B, double *dB);
/* Polynomial envelope f(r) (0 for r >= r_max) and df/dr. */
CGQ_FN double cgq_poly_cutoff(double p, double r_max, double r, double *df);
#endif
