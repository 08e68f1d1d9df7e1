/* dtype.c: sizes, names and IEEE half-precision conversion. */
#include "base/dtype.h"

size_t cf_dtype_size(cf_dtype t) {
    switch (t) {
    case CF_F32: return 4;
    case CF_F16: return 2;
    case CF_BF16: return 2;
    case CF_I32: return 4;
    case CF_U32: return 4;
    default: return 0;   /* CF_Q has no element size: its bytes are cf_qweight_bytes */
    }
}

const char *cf_dtype_name(cf_dtype t) {
    switch (t) {
    case CF_F32: return "F32";
    case CF_F16: return "F16";
    case CF_BF16: return "BF16";
    case CF_I32: return "I32";
    case CF_U32: return "U32";
    case CF_Q: return "Q";
    default: return "?";
    }
}

float cf_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalize */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) { man <<= 1; exp--; }
            man &= 0x3ff;
            u = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t cf_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    int32_t exp = (int32_t)((u >> 23) & 0xff) - 127 + 15;
    uint32_t man = u & 0x7fffff;
    if (((u >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    if (exp >= 31) return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) {
        if (exp < -10) return (uint16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)exp << 10) | (man >> 13);
    uint32_t rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++;
    return (uint16_t)half;
}

void cf_to_f32(float *dst, const void *src, cf_dtype t, size_t n) {
    switch (t) {
    case CF_F32: memcpy(dst, src, n * 4); break;
    case CF_BF16: {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = cf_bf16_to_f32(s[i]);
        break;
    }
    case CF_F16: {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = cf_f16_to_f32(s[i]);
        break;
    }
    case CF_I32: {
        const int32_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = (float)s[i];
        break;
    }
    default: break;
    }
}

void cf_from_f32(void *dst, const float *src, cf_dtype t, size_t n) {
    uint16_t *d = dst;
    switch (t) {
    case CF_F32: memcpy(dst, src, n * 4); break;
    case CF_BF16:
        for (size_t i = 0; i < n; i++) d[i] = cf_f32_to_bf16(src[i]);
        break;
    case CF_F16:
        for (size_t i = 0; i < n; i++) d[i] = cf_f32_to_f16(src[i]);
        break;
    default: break;
    }
}
