/* An open-addressing hash table from int64 keys to int64 values, for lookuplinear/_idmap.py.
 *
 * The table is one int64 array of 2 * size entries (size a power of 2): slot s holds its key at
 * [2s] and its value at [2s + 1], so one probe reads one cache line; a negative value marks an
 * empty slot. Linear probing from splitmix64(key); erase shifts the following entries back
 * (no tombstones), so a lookup never walks past deleted slots. Batches are probed with the
 * slot of the entry AHEAD positions later prefetched: a lookup in a table larger than the
 * caches waits on memory, and the prefetch overlaps those waits. */
#include "common.h"

#define AHEAD 16

LL_INLINE uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

/* the slot holding key, else the empty slot where the probe for it ends; -1 when the probe
 * has walked every slot without either (a table with no empty slot: a damaged one) */
LL_INLINE int64_t slot_of(const int64_t *table, uint64_t mask, int64_t key) {
    uint64_t s = mix((uint64_t)key) & mask;
    for (uint64_t k = 0; k <= mask; k++, s = (s + 1) & mask)
        if (table[2 * s + 1] < 0 || table[2 * s] == key) return (int64_t)s;
    return -1;
}

/* out[i] = the value of keys[i], or -1 when absent */
LL_EXPORT void ll_idmap_find(const int64_t *table, int64_t mask, const int64_t *keys, int64_t n,
                             int64_t *out) {
    const uint64_t m = (uint64_t)mask;
    for (int64_t i = 0; i < n; i++) {
        if (i + AHEAD < n) __builtin_prefetch(&table[2 * (mix((uint64_t)keys[i + AHEAD]) & m)]);
        const int64_t s = slot_of(table, m, keys[i]);
        out[i] = s < 0 ? -1 : table[2 * s + 1];
    }
}

/* set keys[i] -> values[i] (inserted, or overwritten when present); returns the number of
 * keys that were absent, or -1 when a key found no slot (a full table: the others are set).
 * The caller keeps the load below one half. */
LL_EXPORT int64_t ll_idmap_set(int64_t *table, int64_t mask, const int64_t *keys,
                               const int64_t *values, int64_t n) {
    int64_t added = 0, full = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t s = slot_of(table, (uint64_t)mask, keys[i]);
        if (s < 0) {
            full = 1;
            continue;
        }
        added += table[2 * s + 1] < 0;
        table[2 * s] = keys[i];
        table[2 * s + 1] = values[i];
    }
    return full ? -1 : added;
}

/* out[i] = (the value of keys[i], 0 when absent) + adds[i], stored back: counts that add up.
 * Returns the number of keys that were absent, or -1 when a key found no slot (a full table:
 * its out[i] is -1, the others are added) */
LL_EXPORT int64_t ll_idmap_add(int64_t *table, int64_t mask, const int64_t *keys,
                               const int64_t *adds, int64_t n, int64_t *out) {
    int64_t added = 0, full = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t s = slot_of(table, (uint64_t)mask, keys[i]);
        if (s < 0) {
            full = 1;
            out[i] = -1;
            continue;
        }
        int64_t old = table[2 * s + 1];
        added += old < 0;
        table[2 * s] = keys[i];
        table[2 * s + 1] = out[i] = (old < 0 ? 0 : old) + adds[i];
    }
    return full ? -1 : added;
}

/* remove keys[i] where present; returns how many were */
LL_EXPORT int64_t ll_idmap_erase(int64_t *table, int64_t mask, const int64_t *keys, int64_t n) {
    const uint64_t m = (uint64_t)mask;
    int64_t removed = 0;
    for (int64_t k = 0; k < n; k++) {
        const int64_t at = slot_of(table, m, keys[k]);
        if (at < 0 || table[2 * at + 1] < 0) continue;
        uint64_t i = (uint64_t)at;
        removed++;
        table[2 * i + 1] = -1;
        for (uint64_t j = (i + 1) & m; table[2 * j + 1] >= 0; j = (j + 1) & m) {
            uint64_t home = mix((uint64_t)table[2 * j]) & m;
            /* the entry at j stays if its home lies cyclically in (i, j] */
            int stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
            if (stays) continue;
            table[2 * i] = table[2 * j];
            table[2 * i + 1] = table[2 * j + 1];
            table[2 * j + 1] = -1;
            i = j;
        }
    }
    return removed;
}

/* out[i] = the value of keys[i]; an absent key gets the value *next (then incremented) while
 * *next < end and the table has an empty slot, else -1: new keys numbered in order of first
 * appearance. Returns how many keys were added. */
LL_EXPORT int64_t ll_idmap_assign(int64_t *table, int64_t mask, const int64_t *keys, int64_t n,
                                  int64_t *next, int64_t end, int64_t *out) {
    const uint64_t m = (uint64_t)mask;
    int64_t added = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i + AHEAD < n) __builtin_prefetch(&table[2 * (mix((uint64_t)keys[i + AHEAD]) & m)]);
        int64_t s = slot_of(table, m, keys[i]);
        if (s < 0) {
            out[i] = -1;
        } else if (table[2 * s + 1] >= 0) {
            out[i] = table[2 * s + 1];
        } else if (*next < end) {
            table[2 * s] = keys[i];
            table[2 * s + 1] = out[i] = (*next)++;
            added++;
        } else {
            out[i] = -1;
        }
    }
    return added;
}

/* out[i] = splitmix64(keys[i]) (the probe start above; lookuplinear/_hashing.py holds its
 * torch twin, tested equal) */
LL_EXPORT void ll_splitmix64(const int64_t *keys, int64_t n, int64_t *out) {
    for (int64_t i = 0; i < n; i++) out[i] = (int64_t)mix((uint64_t)keys[i]);
}
