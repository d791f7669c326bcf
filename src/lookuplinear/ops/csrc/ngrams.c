/* Word and hashed word n-gram counts of tokenized texts, as scikit-learn counts and hashes them
 * (lookuplinear/ops/_ngrams.py calls them; where this library was not built it computes
 * the same matrix in Python with scikit-learn's own murmurhash3_32).
 *
 * Dense equivalent of ll_count_rows: X[i, column[t]] counts token t in text i (column[t] >= 0),
 * and X[i, n_words + bucket(murmur3(g))] counts each word n-gram g of text i, 2 <= len(g) <=
 * word_ngrams, where g is the n-gram's words joined by single spaces, in UTF-8; as a canonical
 * CSR matrix (each row's columns sorted, each once). That is
 * HashingVectorizer(ngram_range=(2, n), alternate_sign=False, norm=None) next to
 * CountVectorizer(vocabulary=...), on the same tokens.
 *
 * murmur3 is MurmurHash3_x86_32 with seed 0, read as a signed 32-bit integer, and bucket(h) is
 * FeatureHasher's abs(h) % n_features with abs(-2**31) taken as 2**31.
 *
 * Why C: the n-gram's bytes, and the spaces between them, are streamed through the hash from the
 * tokens' bytes, so no n-gram string is built; joining and hashing the strings in Python would
 * be most of the time of FastTextVectorizer.fit_transform (benchmarks/bench_text.py).
 */
#include "common.h"

/* ---------------------------------------------------------------- MurmurHash3_x86_32 */

/* the hash of a byte stream fed one byte at a time: h the state, k the block being filled
 * (m bytes of it, little-endian), len the bytes so far */
typedef struct {
    uint32_t h, k;
    int m;
    int64_t len;
} murmur;

LL_INLINE uint32_t rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

/* the mix of one 4-byte block (or the tail) before it enters the hash */
LL_INLINE uint32_t scramble(uint32_t k) { return rotl32(k * 0xCC9E2D51u, 15) * 0x1B873593u; }

LL_INLINE void murmur_byte(murmur *s, uint8_t byte) {
    s->k |= (uint32_t)byte << (8 * s->m);
    if (++s->m == 4) {
        s->h = rotl32(s->h ^ scramble(s->k), 13) * 5 + 0xE6546B64u;
        s->k = 0;
        s->m = 0;
    }
    s->len++;
}

LL_INLINE void murmur_bytes(murmur *s, const uint8_t *p, int64_t n) {
    for (int64_t i = 0; i < n; i++) murmur_byte(s, p[i]);
}

/* the tail and the final mix: the signed 32-bit hash */
LL_INLINE int32_t murmur_finish(const murmur *s) {
    uint32_t h = s->h;
    if (s->m > 0) h ^= scramble(s->k);
    h ^= (uint32_t)s->len;
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    return (int32_t)h;
}

/* FeatureHasher's column of the signed hash h: abs(h) % bucket, abs(-2**31) taken as 2**31 (in
 * 32 bits it has no absolute value; scikit-learn defines the column this way) */
LL_INLINE int64_t bucket_of(int32_t h, int64_t bucket) {
    int64_t a = h == INT32_MIN ? INT64_C(2147483648) : (int64_t)(h < 0 ? -h : h);
    return a % bucket;
}

/* the signed hash of n bytes (the tests hold it to scikit-learn's murmurhash3_32) */
LL_EXPORT int64_t ll_murmur3_32(const uint8_t *data, int64_t n) {
    murmur s = {0, 0, 0, 0};
    murmur_bytes(&s, data, n);
    return murmur_finish(&s);
}

/* bucket_of for the tests: h a signed 32-bit hash, bucket >= 1 */
LL_EXPORT int64_t ll_ngram_bucket(int64_t h, int64_t bucket) {
    return bucket_of((int32_t)h, bucket);
}

/* ---------------------------------------------------------------- token numbers */

/* ids[k], the position of the first occurrence of token k's string (so ids[k] <= k, and
 * ids[k] == k at a first occurrence), becomes that string's number in order of first
 * occurrence, in place in one pass: a first occurrence takes the next number, any other token
 * that of its first occurrence, already renumbered. */
LL_EXPORT void ll_renumber_ids(int64_t *ids, int64_t n) {
    int64_t next = 0;
    for (int64_t k = 0; k < n; k++) ids[k] = ids[k] == k ? next++ : ids[ids[k]];
}

/* ---------------------------------------------------------------- sorting a row's columns */

/* introsort of a[0:n]: quicksort on the median of three, insertion sort for short ranges, and
 * heapsort where the quicksort goes too deep (hashed columns are random, but a text can repeat
 * one n-gram many times). A row is short: at most word_ngrams entries a token. */
#define LL_SORT(I, SFX)                                                                          \
    static void insertion_##SFX(I *a, int64_t n) {                                               \
        for (int64_t i = 1; i < n; i++) {                                                        \
            I v = a[i];                                                                          \
            int64_t j = i;                                                                       \
            for (; j > 0 && a[j - 1] > v; j--) a[j] = a[j - 1];                                  \
            a[j] = v;                                                                            \
        }                                                                                        \
    }                                                                                            \
    static void sift_##SFX(I *a, int64_t root, int64_t n) {                                      \
        I v = a[root];                                                                           \
        for (int64_t c; (c = 2 * root + 1) < n; root = c) {                                      \
            if (c + 1 < n && a[c + 1] > a[c]) c++;                                               \
            if (a[c] <= v) break;                                                                \
            a[root] = a[c];                                                                      \
        }                                                                                        \
        a[root] = v;                                                                             \
    }                                                                                            \
    static void heapsort_##SFX(I *a, int64_t n) {                                                \
        for (int64_t i = n / 2; i-- > 0;) sift_##SFX(a, i, n);                                   \
        for (int64_t e = n - 1; e > 0; e--) {                                                    \
            I t = a[0];                                                                          \
            a[0] = a[e];                                                                         \
            a[e] = t;                                                                            \
            sift_##SFX(a, 0, e);                                                                 \
        }                                                                                        \
    }                                                                                            \
    static void introsort_##SFX(I *a, int64_t n, int depth) {                                    \
        while (n > 24) {                                                                         \
            if (depth-- == 0) {                                                                  \
                heapsort_##SFX(a, n);                                                            \
                return;                                                                          \
            }                                                                                    \
            I x = a[0], y = a[n / 2], z = a[n - 1];                                              \
            I pivot = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));     \
            int64_t i = 0, j = n - 1;                                                            \
            for (;;) { /* Hoare partition: a[0:j+1] <= pivot <= a[j+1:n] */                     \
                while (a[i] < pivot) i++;                                                        \
                while (a[j] > pivot) j--;                                                        \
                if (i >= j) break;                                                               \
                I t = a[i];                                                                      \
                a[i++] = a[j];                                                                   \
                a[j--] = t;                                                                      \
            }                                                                                    \
            int64_t left = j + 1; /* the smaller part recursed, the larger looped */         \
            if (left < n - left) {                                                               \
                introsort_##SFX(a, left, depth);                                                 \
                a += left;                                                                       \
                n -= left;                                                                       \
            } else {                                                                             \
                introsort_##SFX(a + left, n - left, depth);                                      \
                n = left;                                                                        \
            }                                                                                    \
        }                                                                                        \
        insertion_##SFX(a, n);                                                                   \
    }

LL_SORT(int32_t, i32)
LL_SORT(int64_t, i64)

/* ---------------------------------------------------------------- the count matrix */

/* The CSR arrays of the dense equivalent above, written into indptr (n_docs + 1), indices and
 * data (at least len(ids) * max(word_ngrams, 1) each: one word and word_ngrams - 1 n-grams a
 * token at most). Text d's tokens are ids[doc_ptr[d]:doc_ptr[d + 1]], token t's UTF-8 bytes
 * text[starts[t]:starts[t + 1]]. Returns the number of entries. */
#define LL_COUNT_ROWS(I, SFX)                                                                    \
    LL_EXPORT int64_t ll_count_rows_##SFX(                                                       \
        const int64_t *ids, const int64_t *doc_ptr, int64_t n_docs, const int64_t *column,       \
        const uint8_t *text, const int64_t *starts, int64_t word_ngrams, int64_t bucket,         \
        int64_t n_words, int64_t *indptr, I *indices, float *data) {                             \
        int64_t pos = 0;                                                                         \
        indptr[0] = 0;                                                                           \
        for (int64_t d = 0; d < n_docs; d++) {                                                   \
            int64_t a = doc_ptr[d], b = doc_ptr[d + 1], first = pos;                             \
            for (int64_t i = a; i < b; i++) {                                                    \
                int64_t c = column[ids[i]];                                                      \
                if (c >= 0) indices[pos++] = (I)c;                                               \
            }                                                                                    \
            for (int64_t n = 2; n <= word_ngrams; n++)                                           \
                for (int64_t i = a; i + n <= b; i++) {                                           \
                    murmur s = {0, 0, 0, 0};                                                     \
                    for (int64_t j = 0; j < n; j++) {                                            \
                        int64_t t = ids[i + j];                                                  \
                        if (j > 0) murmur_byte(&s, ' ');                                         \
                        murmur_bytes(&s, text + starts[t], starts[t + 1] - starts[t]);           \
                    }                                                                            \
                    indices[pos++] = (I)(n_words + bucket_of(murmur_finish(&s), bucket));        \
                }                                                                                \
            /* the row's columns sorted, and each repeat counted in place */                     \
            int64_t len = pos - first, depth = 0;                                                \
            for (int64_t m = len; m > 1; m >>= 1) depth += 2;                                    \
            introsort_##SFX(indices + first, len, (int)depth);                                   \
            int64_t out = first;                                                                 \
            for (int64_t i = first; i < pos; i++) {                                              \
                if (out > first && indices[i] == indices[out - 1]) {                             \
                    data[out - 1] += 1.0f;                                                       \
                } else {                                                                         \
                    indices[out] = indices[i];                                                   \
                    data[out++] = 1.0f;                                                          \
                }                                                                                \
            }                                                                                    \
            pos = out;                                                                           \
            indptr[d + 1] = pos;                                                                 \
        }                                                                                        \
        return pos;                                                                              \
    }

LL_COUNT_ROWS(int32_t, i32)
LL_COUNT_ROWS(int64_t, i64)
