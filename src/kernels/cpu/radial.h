/* radial.h: MACE Bessel basis and polynomial cutoff envelope with derivatives in r. */
#ifndef CGQ_CPU_RADIAL_H
#define CGQ_CPU_RADIAL_H
#include "kernels/portable.h"
#include "model/model.h"
/* B[n] = prefactor sin(w_n r)/r and dB[n] = dB/dr (dB may be NULL). */
CGQ_FN void cgq_bessel(const cgq_model *m, double r, double *B, double *dB);
/* Polynomial envelope f(r) (0 for r >= r_max) and df/dr. */
CGQ_FN double cgq_poly_cutoff(double p, double r_max, double r, double *df);
/* Agnesi transform r' = 1 / (1 + a (r/r0)^q / (1 + (r/r0)^(q-p))), r0 = mean covalent radius of the
 * pair; *dr = dr'/dr. su, sv: model species indices. */
CGQ_FN double cgq_agnesi(const cgq_model *m, int su, int sv, double r, double *dr);
/* ZBL repulsion of one edge as MACE adds it to the receiver: 0.5 V(r) envelope(r); *de = d/dr. */
CGQ_FN double cgq_zbl_edge(const cgq_model *m, int su, int sv, double r, double *de);
#endif
