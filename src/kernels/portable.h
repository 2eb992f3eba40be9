/* portable.h: qualifiers that let the reference math compile both as C (CPU backend) and as CUDA/HIP
 * device code (GPU backend includes the same sources), so both backends run one definition. */
#ifndef CGQ_PORTABLE_H
#define CGQ_PORTABLE_H

#if defined(__CUDACC__) || defined(__HIPCC__)
#define CGQ_FN static __host__ __device__       /* public kernel functions, private copy per GPU TU */
#define CGQ_INTERNAL static inline __host__ __device__ /* file-local helpers */
#define CGQ_RESTRICT __restrict__
#else
#ifndef CGQ_FN
#define CGQ_FN
#endif
#define CGQ_INTERNAL static inline
#define CGQ_RESTRICT restrict
#endif

#endif
