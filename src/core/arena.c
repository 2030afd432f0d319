/*
 * arena.c - the chunked bump allocator behind every step tensor and tape node.
 *
 * Invariant: chunks form a list that is only ever extended, and reset rewinds to the first
 * chunk. A step that makes the same requests as the previous one therefore lands in the same
 * chunks and allocates nothing; a larger step inserts chunks where it needs them.
 */
#include <stdint.h>
#include <string.h>

#include "core_internal.h"

#define CT_ARENA_ALIGN 64
#define CT_ARENA_HEADER                                                                            \
    ((sizeof(ct_arena_chunk) + CT_ARENA_ALIGN - 1) & ~(size_t)(CT_ARENA_ALIGN - 1))

void ct_arena_init(ct_arena *a, ct_ctx *ctx, size_t chunk_size) {
    memset(a, 0, sizeof *a);
    a->ctx = ctx;
    a->chunk_size = chunk_size ? chunk_size : ((size_t)4 << 20);
}

void ct_arena_fini(ct_arena *a) {
    ct_arena_chunk *c = a->head;
    while (c) {
        ct_arena_chunk *next = c->next;
        ct_free(a->ctx, c, CT_ARENA_HEADER + c->size);
        c = next;
    }
    memset(a, 0, sizeof *a);
}

static ct_arena_chunk *new_chunk(ct_arena *a, size_t size) {
    if (size > SIZE_MAX - CT_ARENA_HEADER) return NULL;
    ct_arena_chunk *c = ct_alloc(a->ctx, CT_ARENA_HEADER + size);
    if (!c) return NULL;
    c->next = NULL;
    c->size = size;
    c->used = 0;
    a->capacity += size;
    a->n_allocations++;
    return c;
}

void *ct_arena_alloc(ct_arena *a, size_t size) {
    size_t need = (size + CT_ARENA_ALIGN - 1) & ~(size_t)(CT_ARENA_ALIGN - 1);
    if (need < size) return NULL;
    if (need == 0) need = CT_ARENA_ALIGN;
    if (!a->current) {
        if (!a->head) {
            a->head = new_chunk(a, need > a->chunk_size ? need : a->chunk_size);
            if (!a->head) return NULL;
        }
        a->current = a->head;
    }
    /* Move forward through chunks kept from earlier steps until one fits. */
    while (a->current->size - a->current->used < need) {
        ct_arena_chunk *next = a->current->next;
        if (next && next->size >= need) {
            next->used = 0;
            a->current = next;
            break;
        }
        if (next) {
            /* Too small for this request: skip it this time (it stays for smaller ones). */
            next->used = next->size;
            a->current = next;
            continue;
        }
        ct_arena_chunk *c = new_chunk(a, need > a->chunk_size ? need : a->chunk_size);
        if (!c) return NULL;
        a->current->next = c;
        a->current = c;
    }
    char *p = (char *)a->current + CT_ARENA_HEADER + a->current->used;
    a->current->used += need;
    a->in_use += need;
    return p;
}

void ct_arena_reset(ct_arena *a) {
    /* O(1): later chunks get used = 0 when the bump pointer moves onto them. */
    if (a->head) a->head->used = 0;
    a->current = a->head;
    a->in_use = 0;
}

void ct_arena_mark(const ct_arena *a, void **chunk, size_t *used, size_t *in_use) {
    *chunk = a->current;
    *used = a->current ? a->current->used : 0;
    *in_use = a->in_use;
}

void ct_arena_rewind(ct_arena *a, void *chunk, size_t used, size_t in_use) {
    if (!chunk) {
        ct_arena_reset(a); /* marked before the first allocation */
        return;
    }
    a->current = chunk;
    a->current->used = used; /* later chunks get used = 0 when the bump pointer reaches them */
    a->in_use = in_use;
}

bool ct_arena_holds(const ct_arena *a, const void *p) {
    uintptr_t u = (uintptr_t)p;
    for (const ct_arena_chunk *c = a->head; c; c = c->next) {
        uintptr_t start = (uintptr_t)c + CT_ARENA_HEADER;
        if (u >= start && u - start < c->size) return true;
    }
    return false;
}

void ct_arena_trim(ct_arena *a) {
    ct_ctx *ctx = a->ctx;
    size_t chunk_size = a->chunk_size;
    int64_t n_allocations = a->n_allocations;
    ct_arena_fini(a);
    ct_arena_init(a, ctx, chunk_size);
    a->n_allocations = n_allocations;
}
