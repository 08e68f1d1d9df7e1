/* cuda_pool.h: a first-fit allocator over one device allocation made at start, so that tensors are
 * carved out without cudaMalloc (which would synchronize and cannot be recorded in a graph) and running
 * out of memory is an ordinary error. Bookkeeping only: it never touches the memory. */
#ifndef CF_BACKEND_CUDA_POOL_H
#define CF_BACKEND_CUDA_POOL_H

#include <stddef.h>

typedef struct cf_pool_block cf_pool_block;

typedef struct cf_pool {
    char *base;
    size_t size;
    size_t used;            /* bytes in allocated blocks */
    cf_pool_block *head;    /* blocks in address order, covering [base, base + size) */
} cf_pool;

#define CF_POOL_ALIGN 256

/* Starts bookkeeping of [base, base + size). Returns 0, or -1 when out of host memory. */
int cf_pool_init(cf_pool *p, void *base, size_t size);
void cf_pool_release(cf_pool *p);
/* NULL when no free block holds bytes (rounded up to CF_POOL_ALIGN). */
void *cf_pool_alloc(cf_pool *p, size_t bytes);
void cf_pool_free(cf_pool *p, void *ptr);
size_t cf_pool_largest_free(const cf_pool *p);

#endif
