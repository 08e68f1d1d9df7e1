/* cuda_pool.c: first-fit over an address-ordered list of blocks; freeing merges with free neighbours. */
#include "backend/cuda/cuda_pool.h"

#include <stdlib.h>

struct cf_pool_block {
    size_t off, size;
    int free;
    cf_pool_block *prev, *next;
};

int cf_pool_init(cf_pool *p, void *base, size_t size) {
    p->base = base;
    p->size = size;
    p->used = 0;
    p->head = calloc(1, sizeof *p->head);
    if (!p->head) return -1;
    p->head->size = size;
    p->head->free = 1;
    return 0;
}

void cf_pool_release(cf_pool *p) {
    for (cf_pool_block *b = p->head, *n; b; b = n) {
        n = b->next;
        free(b);
    }
    p->head = NULL;
}

void *cf_pool_alloc(cf_pool *p, size_t bytes) {
    size_t need = (bytes + CF_POOL_ALIGN - 1) / CF_POOL_ALIGN * CF_POOL_ALIGN;
    if (need == 0) need = CF_POOL_ALIGN;
    for (cf_pool_block *b = p->head; b; b = b->next) {
        if (!b->free || b->size < need) continue;
        if (b->size > need) {
            cf_pool_block *rest = calloc(1, sizeof *rest);
            if (!rest) return NULL;
            rest->off = b->off + need;
            rest->size = b->size - need;
            rest->free = 1;
            rest->prev = b;
            rest->next = b->next;
            if (b->next) b->next->prev = rest;
            b->next = rest;
            b->size = need;
        }
        b->free = 0;
        p->used += b->size;
        return p->base + b->off;
    }
    return NULL;
}

static void merge_next(cf_pool_block *b) {
    cf_pool_block *n = b->next;
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    free(n);
}

void cf_pool_free(cf_pool *p, void *ptr) {
    if (!ptr) return;
    size_t off = (size_t)((char *)ptr - p->base);
    cf_pool_block *b = p->head;
    while (b && b->off != off) b = b->next;
    if (!b || b->free) return;
    b->free = 1;
    p->used -= b->size;
    if (b->next && b->next->free) merge_next(b);
    if (b->prev && b->prev->free) merge_next(b->prev);
}

size_t cf_pool_largest_free(const cf_pool *p) {
    size_t best = 0;
    for (const cf_pool_block *b = p->head; b; b = b->next)
        if (b->free && b->size > best) best = b->size;
    return best;
}
