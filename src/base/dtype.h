/* dtype.h: element types of tensors and the scalar conversions between them. */
#ifndef CF_BASE_DTYPE_H
#define CF_BASE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum cf_dtype {
    CF_F32 = 0,
    CF_F16,
    CF_BF16,
    CF_I32,
    CF_U32,      /* packed words of quantized weights (files only; no op computes with them) */
    CF_Q,        /* an MLX affine-quantized weight on a backend: data points to a cf_qweight (backend.h) */
    CF_DTYPE_COUNT
} cf_dtype;

size_t cf_dtype_size(cf_dtype t);
const char *cf_dtype_name(cf_dtype t);

static inline float cf_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest even, NaN kept quiet. */
static inline uint16_t cf_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float cf_f16_to_f32(uint16_t h);
uint16_t cf_f32_to_f16(float f);

/* Converts n elements of src (type t) to float32. */
void cf_to_f32(float *dst, const void *src, cf_dtype t, size_t n);
/* Converts n float32 values to type t (F32, BF16 or F16; rounding to nearest even). */
void cf_from_f32(void *dst, const float *src, cf_dtype t, size_t n);

#endif
