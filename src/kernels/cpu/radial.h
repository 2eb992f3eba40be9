/* radial.h: MACE Bessel basis and polynomial cutoff envelope with derivatives in r. */
#ifndef CGQ_CPU_RADIAL_H
#define CGQ_CPU_RADIAL_H
#include "model/model.h"
/* B[n] = prefactor sin(w_n r)/r and dB[n] = dB/dr (dB may be NULL). */
void cgq_bessel(const cgq_model *m, double r, double *B, double *dB);
/* Polynomial envelope f(r) (0 for r >= r_max) and df/dr. */
double cgq_poly_cutoff(double p, double r_max, double r, double *df);
#endif
