/* The best rows of a BM25 query, exactly, three ways (the caller picks by cost):
 *
 * - one term: its impact-ordered postings are the ranking;
 * - the walk, document-at-a-time MaxScore: the query's row-ordered postings are walked
 *   once in row order; terms whose best scores together cannot reach the current threshold
 *   (the window's worst score so far) are only probed, by galloping, for rows the other
 *   terms bring; a row is dropped as soon as its score so far plus the best the remaining
 *   terms could add stays below the threshold; rows a filter excludes are leapt over. A
 *   first threshold comes from exactly scoring each term's best postings.
 * - sums, term at a time into a dense accumulator, then one pass over the rows: costs every
 *   posting and row, but a few ns each, where the walk's per-row bookkeeping over several
 *   common words costs more (serving/lexical.py has the measurements).
 *
 * Scores are summed in float32 in the query's term order, a posting's score multiplied by
 * its term's float32 scale first, exactly as `BM25Index.score` sums them, so both agree to
 * the bit (the build compiles with -ffp-contract=off: no fused multiply-add).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TERMS 64
/* Bounds are sums of float32 values in another order than the exact score's: a row is
 * only dropped when its bound is below the threshold by more than this relative margin. */
#define MARGIN 1e-5

typedef struct {
    const int32_t *rows;    /* row-ordered postings: rows ascending */
    const float *scores;
    Py_ssize_t end;         /* one past the term's last posting */
    Py_ssize_t cursor;      /* walks forward only */
    float scale;
    double best;            /* the term's highest scaled posting score */
} Term;

typedef struct {
    int32_t *rows;
    float *scores;
    Py_ssize_t size, capacity;
} Found;

/* First position in [lo, hi) whose row is >= target (rows ascending). */
static Py_ssize_t gallop(const int32_t *rows, Py_ssize_t lo, Py_ssize_t hi, int32_t target) {
    if (lo >= hi || rows[lo] >= target) return lo;
    Py_ssize_t low = lo, step = 1, high = lo + 1;
    while (high < hi && rows[high] < target) {
        low = high;
        step <<= 1;
        high = low + step;
    }
    if (high > hi) high = hi;
    while (high - low > 1) { /* rows[low] < target; high == hi or rows[high] >= target */
        Py_ssize_t mid = low + (high - low) / 2;
        if (rows[mid] < target)
            low = mid;
        else
            high = mid;
    }
    return high;
}

/* First eligible row at or after `row`, or `row_count`; zero bytes are skipped eight at a
 * time. */
static Py_ssize_t next_eligible(const uint8_t *eligible, Py_ssize_t row, Py_ssize_t row_count) {
    while (row < row_count && (row & 7)) {
        if (eligible[row]) return row;
        row++;
    }
    uint64_t word;
    while (row + 8 <= row_count && (memcpy(&word, eligible + row, 8), word == 0)) row += 8;
    while (row < row_count && !eligible[row]) row++;
    return row;
}

/* The k best scores seen, as a min-heap: heap[0] is the k-th best once full. */
typedef struct {
    float *values;
    Py_ssize_t size, capacity;
} Heap;

static void heap_offer(Heap *heap, float value) {
    Py_ssize_t i;
    if (heap->size < heap->capacity) {
        i = heap->size++;
        while (i > 0 && heap->values[(i - 1) / 2] > value) {
            heap->values[i] = heap->values[(i - 1) / 2];
            i = (i - 1) / 2;
        }
        heap->values[i] = value;
        return;
    }
    if (value <= heap->values[0]) return;
    i = 0;
    for (;;) {
        Py_ssize_t child = 2 * i + 1;
        if (child >= heap->size) break;
        if (child + 1 < heap->size && heap->values[child + 1] < heap->values[child]) child++;
        if (heap->values[child] >= value) break;
        heap->values[i] = heap->values[child];
        i = child;
    }
    heap->values[i] = value;
}

static int found_add(Found *found, int32_t row, float score) {
    if (found->size == found->capacity) {
        Py_ssize_t capacity = found->capacity ? 2 * found->capacity : 1024;
        int32_t *rows = realloc(found->rows, capacity * sizeof(int32_t));
        if (rows == NULL) return -1;
        found->rows = rows;
        float *scores = realloc(found->scores, capacity * sizeof(float));
        if (scores == NULL) return -1;
        found->scores = scores;
        found->capacity = capacity;
    }
    found->rows[found->size] = row;
    found->scores[found->size++] = score;
    return 0;
}

/* Rows found before the threshold rose: keep those that still reach it. */
static void keep_reaching(Found *found, float threshold) {
    Py_ssize_t kept = 0;
    for (Py_ssize_t i = 0; i < found->size; i++) {
        if (found->scores[i] >= threshold) {
            found->rows[kept] = found->rows[i];
            found->scores[kept++] = found->scores[i];
        }
    }
    found->size = kept;
}

/* The exact score of `row` in term order, by searching each term's postings (no cursor
 * moves); 0 when no term holds it. */
static float exact_score(const Term *terms, const Py_ssize_t *starts, int count, int32_t row) {
    float score = 0.0f;
    for (int t = 0; t < count; t++) {
        Py_ssize_t at = gallop(terms[t].rows, starts[t], terms[t].end, row);
        if (at < terms[t].end && terms[t].rows[at] == row) {
            float value = terms[t].scores[at] * terms[t].scale;
            score += value;
        }
    }
    return score;
}

static void sort_by_best(int *order, int count, const Term *terms) {
    for (int i = 1; i < count; i++) { /* insertion sort: a few terms */
        int value = order[i], j = i;
        while (j > 0 && terms[order[j - 1]].best > terms[value].best) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = value;
    }
}

/* How many of the lowest-best terms (in `order`) cannot bring a row to `threshold` alone. */
static int optional_terms(const double *prefix, int count, double threshold) {
    int optional = 0;
    while (optional < count - 1 && prefix[optional + 1] < threshold * (1 - MARGIN)) optional++;
    return optional;
}

/* The threshold a probe of each term's `depth` best postings guarantees: the k-th best
 * exact score among the eligible rows they hold (or 0 when they hold fewer than k). */
static float probe_threshold(const Term *terms, const Py_ssize_t *starts, int count,
                             const int32_t *impact_rows, const uint8_t *eligible,
                             Py_ssize_t row_count, Py_ssize_t depth, Heap *heap,
                             uint8_t *seen_marks, int *failed) {
    for (int t = 0; t < count; t++) {
        Py_ssize_t stop = starts[t] + depth < terms[t].end ? starts[t] + depth : terms[t].end;
        for (Py_ssize_t i = starts[t]; i < stop; i++) {
            int32_t row = impact_rows[i];
            if (row < 0 || row >= row_count) {
                *failed = 1;
                return 0.0f;
            }
            if (!eligible[row] || seen_marks[row]) continue;
            seen_marks[row] = 1;
            heap_offer(heap, exact_score(terms, starts, count, row));
        }
    }
    for (int t = 0; t < count; t++) { /* clear the marks */
        Py_ssize_t stop = starts[t] + depth < terms[t].end ? starts[t] + depth : terms[t].end;
        for (Py_ssize_t i = starts[t]; i < stop; i++) seen_marks[impact_rows[i]] = 0;
    }
    float threshold = heap->size == heap->capacity ? heap->values[0] : 0.0f;
    heap->size = 0;
    return threshold;
}

/* Every eligible row scoring at least the k-th best eligible score, with its score.
 * Returns -1 on a row outside `eligible`, -2 when out of memory. */
static int best_rows(Term *terms, int count, const uint8_t *eligible, Py_ssize_t row_count,
                     float first_threshold, Heap *heap, Found *found) {
    int order[MAX_TERMS];
    double prefix[MAX_TERMS + 1];
    float contributions[MAX_TERMS];
    uint8_t holds[MAX_TERMS];
    for (int t = 0; t < count; t++) order[t] = t;
    sort_by_best(order, count, terms);
    prefix[0] = 0.0;
    for (int i = 0; i < count; i++) prefix[i + 1] = prefix[i] + terms[order[i]].best;
    float threshold = first_threshold;
    int optional = optional_terms(prefix, count, threshold);
    for (;;) {
        int32_t row = INT32_MAX;
        for (int i = optional; i < count; i++) {
            const Term *term = &terms[order[i]];
            if (term->cursor < term->end && term->rows[term->cursor] < row)
                row = term->rows[term->cursor];
        }
        if (row == INT32_MAX) break;
        if (row < 0 || row >= row_count) return -1;
        if (!eligible[row]) {
            /* Leap to the next eligible row: a narrow filter costs its rows, not the
             * postings between them. */
            Py_ssize_t next = next_eligible(eligible, row + 1, row_count);
            for (int i = optional; i < count; i++) {
                Term *term = &terms[order[i]];
                term->cursor = gallop(term->rows, term->cursor, term->end, (int32_t)next);
            }
            continue;
        }
        double partial = 0.0;
        memset(holds, 0, count);
        for (int i = optional; i < count; i++) {
            Term *term = &terms[order[i]];
            if (term->cursor < term->end && term->rows[term->cursor] == row) {
                float value = term->scores[term->cursor++] * term->scale;
                contributions[order[i]] = value;
                holds[order[i]] = 1;
                partial += value;
            }
        }
        int dropped = 0;
        for (int i = optional - 1; i >= 0; i--) {
            if (partial + prefix[i + 1] < threshold * (1 - MARGIN)) {
                dropped = 1;
                break;
            }
            Term *term = &terms[order[i]];
            term->cursor = gallop(term->rows, term->cursor, term->end, row);
            if (term->cursor < term->end && term->rows[term->cursor] == row) {
                float value = term->scores[term->cursor++] * term->scale;
                contributions[order[i]] = value;
                holds[order[i]] = 1;
                partial += value;
            }
        }
        if (dropped) continue;
        float score = 0.0f;
        for (int t = 0; t < count; t++)
            if (holds[t]) score += contributions[t];
        if (score < threshold) continue;
        if (found_add(found, row, score) < 0) return -2;
        heap_offer(heap, score);
        if (heap->size == heap->capacity && heap->values[0] > threshold) {
            threshold = heap->values[0];
            optional = optional_terms(prefix, count, threshold);
        }
    }
    keep_reaching(found, threshold);
    return 0;
}

/* Zeroed accumulators (a float per row) kept between queries, a few of them: searches on
 * several threads each take one, and a thread count does not decide the memory kept. */
#define KEPT_ACCUMULATORS 4

typedef struct {
    float *sums;
    Py_ssize_t rows;
} Accumulator;

static Accumulator kept_accumulators[KEPT_ACCUMULATORS];
static PyThread_type_lock accumulators_lock;

/* A zeroed accumulator of at least `rows` floats (sums NULL when out of memory). */
static Accumulator take_accumulator(Py_ssize_t rows) {
    Accumulator found = {NULL, 0};
    PyThread_acquire_lock(accumulators_lock, WAIT_LOCK);
    for (int i = 0; i < KEPT_ACCUMULATORS && found.sums == NULL; i++) {
        if (kept_accumulators[i].sums != NULL && kept_accumulators[i].rows >= rows) {
            found = kept_accumulators[i];
            kept_accumulators[i] = (Accumulator){NULL, 0};
        }
    }
    PyThread_release_lock(accumulators_lock);
    if (found.sums == NULL) found = (Accumulator){calloc(rows, sizeof(float)), rows};
    return found;
}

/* Hands a zeroed accumulator back to be kept, or frees it. */
static void give_back(Accumulator accumulator) {
    PyThread_acquire_lock(accumulators_lock, WAIT_LOCK);
    for (int i = 0; i < KEPT_ACCUMULATORS && accumulator.sums != NULL; i++) {
        if (kept_accumulators[i].sums == NULL || kept_accumulators[i].rows < accumulator.rows) {
            Accumulator smaller = kept_accumulators[i]; /* a bigger artifact replaces it */
            kept_accumulators[i] = accumulator;
            accumulator = smaller;
        }
    }
    PyThread_release_lock(accumulators_lock);
    free(accumulator.sums);
}

#define SCAN_BLOCK 64

/* `best_by_sums` into a zeroed accumulator, which it leaves zeroed. */
static int sums_into(float *sums, const Term *terms, const Py_ssize_t *starts, int count,
                     const uint8_t *eligible, Py_ssize_t row_count, Heap *heap, Found *found) {
    for (int t = 0; t < count; t++) {
        const Term *term = &terms[t];
        for (Py_ssize_t i = starts[t]; i < term->end; i++) {
            int32_t row = term->rows[i];
            if (row < 0 || row >= row_count) {
                memset(sums, 0, row_count * sizeof(float));
                return -1;
            }
            float value = term->scores[i] * term->scale;
            sums[row] += value;
        }
    }
    /* Scores are positive, so their bit patterns order as the floats do: a block is
     * skipped by one integer max (vectorised) below the current threshold. */
    int32_t floor_bits = 1;
    for (Py_ssize_t block = 0; block < row_count; block += SCAN_BLOCK) {
        Py_ssize_t stop = block + SCAN_BLOCK < row_count ? block + SCAN_BLOCK : row_count;
        int32_t *bits = (int32_t *)(sums + block);
        int32_t highest = 0;
        for (Py_ssize_t j = 0; j < stop - block; j++) highest = bits[j] > highest ? bits[j] : highest;
        if (highest == 0) continue;
        if (highest >= floor_bits) {
            for (Py_ssize_t row = block; row < stop; row++) {
                float score = sums[row];
                if (score <= 0.0f || !eligible[row]) continue;
                int32_t score_bits;
                memcpy(&score_bits, &score, 4);
                if (score_bits < floor_bits) continue;
                if (found_add(found, (int32_t)row, score) < 0) {
                    memset(sums, 0, row_count * sizeof(float));
                    return -2;
                }
                heap_offer(heap, score);
                if (heap->size == heap->capacity) memcpy(&floor_bits, &heap->values[0], 4);
            }
        }
        memset(sums + block, 0, (stop - block) * sizeof(float));
    }
    keep_reaching(found, heap->size == heap->capacity ? heap->values[0] : 0.0f);
    return 0;
}

/* Term at a time: every posting added into a dense accumulator, in term order (so each
 * row's sum is `BM25Index.score`'s exactly), then one pass over the rows keeps the
 * eligible ones reaching the k-th best, zeroing the accumulator as it goes. Costs every
 * posting plus the row count, however the scores spread. */
static int best_by_sums(const Term *terms, const Py_ssize_t *starts, int count,
                        const uint8_t *eligible, Py_ssize_t row_count, Heap *heap,
                        Found *found) {
    Accumulator accumulator = take_accumulator(row_count);
    if (accumulator.sums == NULL) return -2;
    int status = sums_into(accumulator.sums, terms, starts, count, eligible, row_count, heap,
                           found);
    give_back(accumulator);  /* zeroed by sums_into, whatever its status */
    return status;
}

/* One term: its postings in impact order (scores descending, ties by ascending row) are
 * the ranking; the first k eligible ones and those tied with the k-th are the answer. */
static int best_of_one(const Term *term, Py_ssize_t start, const int32_t *impact_rows,
                       const float *impact_scores, const uint8_t *eligible,
                       Py_ssize_t row_count, Py_ssize_t k, Found *found) {
    float last = 0.0f;
    for (Py_ssize_t i = start; i < term->end; i++) {
        int32_t row = impact_rows[i];
        if (row < 0 || row >= row_count) return -1;
        if (!eligible[row]) continue;
        float score = impact_scores[i] * term->scale;
        if (found->size >= k && score < last) break;
        if (found_add(found, row, score) < 0) return -2;
        last = score;
    }
    return 0;
}

/* best_rows(rows, scores, impact_rows, impact_scores, spans, scales, eligible, count, depth,
 *           by_sums) -> (rows bytes of int32, scores bytes of float32). */
static PyObject *py_best_rows(PyObject *self, PyObject *args) {
    Py_buffer rows, scores, impact_rows, impact_scores, spans, scales, eligible;
    Py_ssize_t count, depth;
    int by_sums;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*nnp", &rows, &scores, &impact_rows,
                          &impact_scores, &spans, &scales, &eligible, &count, &depth, &by_sums))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t postings = rows.len / (Py_ssize_t)sizeof(int32_t);
    Py_ssize_t term_count = scales.len / (Py_ssize_t)sizeof(float);
    const int64_t *span = spans.buf;
    int spans_valid = spans.len == 2 * term_count * (Py_ssize_t)sizeof(int64_t);
    for (Py_ssize_t t = 0; spans_valid && t < term_count; t++)
        spans_valid = 0 <= span[2 * t] && span[2 * t] < span[2 * t + 1] &&
                      span[2 * t + 1] <= postings;
    if (scores.len != rows.len || impact_rows.len != rows.len || impact_scores.len != rows.len) {
        PyErr_SetString(PyExc_ValueError, "postings arrays differ in length");
    } else if (term_count < 1 || term_count > MAX_TERMS || !spans_valid) {
        PyErr_SetString(PyExc_ValueError, "1 to 64 terms, each a non-empty span of postings");
    } else if (count < 1 || depth < 0) {
        PyErr_SetString(PyExc_ValueError, "count must be positive and depth not negative");
    } else {
        Term terms[MAX_TERMS];
        Py_ssize_t starts[MAX_TERMS];
        const float *scale = scales.buf;
        for (Py_ssize_t t = 0; t < term_count; t++) {
            starts[t] = span[2 * t];
            terms[t] = (Term){
                .rows = (const int32_t *)rows.buf,
                .scores = (const float *)scores.buf,
                .end = span[2 * t + 1],
                .cursor = span[2 * t],
                .scale = scale[t],
                /* impact order: the first is the highest */
                .best = (double)(((const float *)impact_scores.buf)[span[2 * t]] * scale[t]),
            };
        }
        Heap heap = {PyMem_RawMalloc(count * sizeof(float)), 0, count};
        uint8_t *marks = depth ? PyMem_RawCalloc(eligible.len, 1) : NULL;
        Found found = {0};
        int status = heap.values == NULL || (depth && marks == NULL) ? -2 : 0;
        if (status == 0) {
            Py_BEGIN_ALLOW_THREADS
            int failed = 0;
            float first = depth && term_count > 1 && !by_sums ? probe_threshold(terms, starts, (int)term_count,
                                                  impact_rows.buf, eligible.buf, eligible.len,
                                                  depth, &heap, marks, &failed)
                                : 0.0f;
            if (by_sums)
                status = best_by_sums(terms, starts, (int)term_count, eligible.buf,
                                      eligible.len, &heap, &found);
            else if (term_count == 1)
                status = best_of_one(&terms[0], starts[0], impact_rows.buf, impact_scores.buf,
                                     eligible.buf, eligible.len, count, &found);
            else
                status = failed ? -1
                                : best_rows(terms, (int)term_count, eligible.buf, eligible.len,
                                            first, &heap, &found);
            Py_END_ALLOW_THREADS
        }
        if (status == -1) {
            PyErr_SetString(PyExc_ValueError, "a posting's row is outside eligible");
        } else if (status == -2) {
            PyErr_NoMemory();
        } else {
            /* y# turns a NULL buffer (nothing found) into None, hence "" */
            result = Py_BuildValue("(y#y#)", found.size ? (const char *)found.rows : "",
                                   found.size * (Py_ssize_t)sizeof(int32_t),
                                   found.size ? (const char *)found.scores : "",
                                   found.size * (Py_ssize_t)sizeof(float));
        }
        PyMem_RawFree(heap.values);
        PyMem_RawFree(marks);
        free(found.rows);
        free(found.scores);
    }
    PyBuffer_Release(&rows);
    PyBuffer_Release(&scores);
    PyBuffer_Release(&impact_rows);
    PyBuffer_Release(&impact_scores);
    PyBuffer_Release(&spans);
    PyBuffer_Release(&scales);
    PyBuffer_Release(&eligible);
    return result;
}

static PyMethodDef METHODS[] = {
    {"best_rows", py_best_rows, METH_VARARGS,
     "best_rows(rows, scores, impact_rows, impact_scores, spans, scales, eligible, count,\n"
     "depth, by_sums) -> (rows, scores) as bytes of int32 and float32: every eligible row\n"
     "whose BM25 score reaches the count-th best eligible score. spans: int64 (start, end)\n"
     "per term; scales: float32 per term; eligible: one byte per row; depth: probe postings\n"
     "per term for the walk; by_sums: every posting summed term at a time instead."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, "_bm25", "Exact top-k BM25 by document-at-a-time MaxScore.", -1,
    METHODS,
};

PyMODINIT_FUNC PyInit__bm25(void) {
    accumulators_lock = PyThread_allocate_lock();
    if (accumulators_lock == NULL) return PyErr_NoMemory();
    PyObject *module = PyModule_Create(&MODULE);
    if (module != NULL && PyModule_AddIntConstant(module, "MAX_TERMS", MAX_TERMS) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
