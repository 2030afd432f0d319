/*
 * test_alloc.h - a counting, fault-injecting allocator for tests (Lua's countlimit): counts
 * allocations and live bytes, and can fail the Nth allocation from now on.
 */
#ifndef CT_TEST_ALLOC_H
#define CT_TEST_ALLOC_H

#include <stdlib.h>

#include "ctrain/status.h"

typedef struct test_alloc {
    long long n_alloc; /* successful allocations */
    long long n_free;
    long long live;    /* bytes allocated and not freed */
    long long fail_at; /* fail when n_alloc + 1 == fail_at; 0 = never */
    long long size_mismatch;
} test_alloc;

static void *test_alloc_fn(void *user, size_t size) {
    test_alloc *t = user;
    if (t->fail_at && t->n_alloc + 1 >= t->fail_at) return NULL;
    size_t rounded = (size + 63) & ~(size_t)63;
    /* store the size in front of the block to check that free is given the same size */
    unsigned char *p = aligned_alloc(64, rounded + 64);
    if (!p) return NULL;
    *(size_t *)p = size;
    t->n_alloc++;
    t->live += (long long)size;
    return p + 64;
}

static void test_free_fn(void *user, void *ptr, size_t size) {
    test_alloc *t = user;
    unsigned char *p = (unsigned char *)ptr - 64;
    if (*(size_t *)p != size) t->size_mismatch++;
    t->n_free++;
    t->live -= (long long)*(size_t *)p;
    free(p);
}

static inline ct_allocator test_allocator(test_alloc *t) {
    ct_allocator a = {test_alloc_fn, test_free_fn, t};
    return a;
}

#endif /* CT_TEST_ALLOC_H */
