/* Int8 dot products of a row range against up to eight query rows, one read of each row.
 *
 * simsimd's cdist computes pair by pair, so a pass for eight queries costs about eight
 * passes (measured at 984,175 x 768 on 2 threads: 102 ms against 23 ms for one). Here each
 * slice of a row is loaded once and multiplied into every query's accumulator, so a pass
 * for eight queries costs about 1.4 passes for one (33 ms, AVX-512 VNNI), and concurrent
 * searches can share a pass (serving/semantic.py).
 *
 * Both instruction sets multiply unsigned by signed bytes. AVX-512 VNNI: the row's bytes
 * are flipped to unsigned (x + 128) and 128 x the query's byte sum is subtracted again.
 * AVX2 (CPUs without VNNI): |row byte| times the query byte carrying the row byte's sign;
 * its pairwise 16-bit sums cannot saturate when query bytes lie within -127..127, which
 * `Int8Codes.quantise_queries` guarantees and the AVX2 path checks. Either way results are
 * the exact integer dot products, the same as simsimd's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define MAX_QUERIES 8

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_VNNI_KERNEL 1
#define VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

#define DEFINE_KERNEL(NQ)                                                                    \
    VNNI static void dot_rows_##NQ(const int8_t *codes, Py_ssize_t dim, const int64_t *rows,  \
                                   Py_ssize_t start, Py_ssize_t stop, const int8_t *queries, \
                                   const int32_t *bias, float *out, Py_ssize_t width) {      \
        const __m512i flip = _mm512_set1_epi8((char)0x80);                                   \
        for (Py_ssize_t i = start; i < stop; i++) {                                          \
            const int8_t *row = codes + (rows ? rows[i] : i) * dim;                          \
            __m512i acc[NQ];                                                                 \
            for (int j = 0; j < NQ; j++) acc[j] = _mm512_setzero_si512();                    \
            for (Py_ssize_t d = 0; d < dim; d += 64) {                                       \
                __m512i a = _mm512_xor_si512(_mm512_loadu_si512(row + d), flip);             \
                for (int j = 0; j < NQ; j++)                                                 \
                    acc[j] = _mm512_dpbusd_epi32(                                            \
                        acc[j], a, _mm512_loadu_si512(queries + j * dim + d));               \
            }                                                                                \
            for (int j = 0; j < NQ; j++)                                                     \
                out[j * width + i] = (float)(_mm512_reduce_add_epi32(acc[j]) - bias[j]);     \
        }                                                                                    \
    }

DEFINE_KERNEL(1)
DEFINE_KERNEL(2)
DEFINE_KERNEL(3)
DEFINE_KERNEL(4)
DEFINE_KERNEL(5)
DEFINE_KERNEL(6)
DEFINE_KERNEL(7)
DEFINE_KERNEL(8)

#define AVX2 __attribute__((target("avx2")))

static AVX2 inline int32_t sum_avx2(__m256i v) {
    __m128i half = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    half = _mm_add_epi32(half, _mm_shuffle_epi32(half, _MM_SHUFFLE(1, 0, 3, 2)));
    half = _mm_add_epi32(half, _mm_shuffle_epi32(half, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(half);
}

#define DEFINE_AVX2_KERNEL(NQ)                                                               \
    AVX2 static void dot_rows_avx2_##NQ(const int8_t *codes, Py_ssize_t dim,                 \
                                        const int64_t *rows, Py_ssize_t start,               \
                                        Py_ssize_t stop, const int8_t *queries,              \
                                        const int32_t *bias, float *out, Py_ssize_t width) { \
        const __m256i ones = _mm256_set1_epi16(1);                                           \
        (void)bias;                                                                          \
        for (Py_ssize_t i = start; i < stop; i++) {                                          \
            const int8_t *row = codes + (rows ? rows[i] : i) * dim;                          \
            __m256i acc[NQ];                                                                 \
            for (int j = 0; j < NQ; j++) acc[j] = _mm256_setzero_si256();                    \
            for (Py_ssize_t d = 0; d < dim; d += 32) {                                       \
                __m256i a = _mm256_loadu_si256((const __m256i *)(row + d));                  \
                __m256i magnitude = _mm256_sign_epi8(a, a);                                  \
                for (int j = 0; j < NQ; j++) {                                               \
                    __m256i q = _mm256_loadu_si256((const __m256i *)(queries + j * dim + d)); \
                    __m256i pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(q, a)); \
                    acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(pairs, ones));       \
                }                                                                            \
            }                                                                                \
            for (int j = 0; j < NQ; j++) out[j * width + i] = (float)sum_avx2(acc[j]);       \
        }                                                                                    \
    }

DEFINE_AVX2_KERNEL(1)
DEFINE_AVX2_KERNEL(2)
DEFINE_AVX2_KERNEL(3)
DEFINE_AVX2_KERNEL(4)
DEFINE_AVX2_KERNEL(5)
DEFINE_AVX2_KERNEL(6)
DEFINE_AVX2_KERNEL(7)
DEFINE_AVX2_KERNEL(8)


/* Nibble rows: per 64 dimensions, 32 bytes whose low nibbles hold dimensions 0-31 and high
 * nibbles 32-63, each an int4 code plus 8 (1..15, unsigned). maddubs multiplies those
 * unsigned bytes by the signed query bytes directly; 8 x the query's byte sum is
 * subtracted at the end. Two products of 15 x 127 per 16-bit lane, twice: within 16 bits. */
#define DEFINE_NIBBLE_KERNEL(NQ)                                                             \
    AVX2 static void nibble_rows_##NQ(const uint8_t *nibbles, Py_ssize_t dim,                \
                                      Py_ssize_t start, Py_ssize_t stop,                     \
                                      const int8_t *queries, const int32_t *bias,            \
                                      float scale, float *out, Py_ssize_t width) {           \
        const __m256i ones = _mm256_set1_epi16(1);                                           \
        const __m256i low = _mm256_set1_epi8(0x0F);                                          \
        for (Py_ssize_t i = start; i < stop; i++) {                                          \
            const uint8_t *row = nibbles + i * (dim / 2);                                    \
            __m256i acc[NQ];                                                                 \
            for (int j = 0; j < NQ; j++) acc[j] = _mm256_setzero_si256();                    \
            for (Py_ssize_t d = 0; d < dim; d += 64) {                                       \
                __m256i packed = _mm256_loadu_si256((const __m256i *)(row + d / 2));         \
                __m256i first = _mm256_and_si256(packed, low);                               \
                __m256i second = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low);        \
                for (int j = 0; j < NQ; j++) {                                               \
                    const int8_t *q = queries + j * dim + d;                                 \
                    __m256i pairs = _mm256_add_epi16(                                        \
                        _mm256_maddubs_epi16(first, _mm256_loadu_si256((const __m256i *)q)), \
                        _mm256_maddubs_epi16(second,                                         \
                                             _mm256_loadu_si256((const __m256i *)(q + 32)))); \
                    acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(pairs, ones));       \
                }                                                                            \
            }                                                                                \
            for (int j = 0; j < NQ; j++)                                                     \
                out[j * width + i] = (float)(sum_avx2(acc[j]) - bias[j]) * scale;            \
        }                                                                                    \
    }

DEFINE_NIBBLE_KERNEL(1)
DEFINE_NIBBLE_KERNEL(2)
DEFINE_NIBBLE_KERNEL(3)
DEFINE_NIBBLE_KERNEL(4)
DEFINE_NIBBLE_KERNEL(5)
DEFINE_NIBBLE_KERNEL(6)
DEFINE_NIBBLE_KERNEL(7)
DEFINE_NIBBLE_KERNEL(8)

typedef void (*kernel_fn)(const int8_t *, Py_ssize_t, const int64_t *, Py_ssize_t, Py_ssize_t,
                          const int8_t *, const int32_t *, float *, Py_ssize_t);
static const kernel_fn KERNELS[MAX_QUERIES + 1] = {
    NULL, dot_rows_1, dot_rows_2, dot_rows_3, dot_rows_4,
    dot_rows_5, dot_rows_6, dot_rows_7, dot_rows_8,
};
static const kernel_fn AVX2_KERNELS[MAX_QUERIES + 1] = {
    NULL, dot_rows_avx2_1, dot_rows_avx2_2, dot_rows_avx2_3, dot_rows_avx2_4,
    dot_rows_avx2_5, dot_rows_avx2_6, dot_rows_avx2_7, dot_rows_avx2_8,
};

typedef void (*nibble_fn)(const uint8_t *, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                          const int8_t *, const int32_t *, float, float *, Py_ssize_t);
static const nibble_fn NIBBLE_KERNELS[MAX_QUERIES + 1] = {
    NULL, nibble_rows_1, nibble_rows_2, nibble_rows_3, nibble_rows_4,
    nibble_rows_5, nibble_rows_6, nibble_rows_7, nibble_rows_8,
};

static int has_vnni(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vnni");
}

static int has_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}
#else
#define HAVE_VNNI_KERNEL 0
static int has_vnni(void) { return 0; }
static int has_avx2(void) { return 0; }
#endif

static int cpu_supported(void) { return has_vnni() || has_avx2(); }

static PyObject *supported(PyObject *self, PyObject *unused) {
    return PyBool_FromLong(cpu_supported());
}

static PyObject *instruction_set(PyObject *self, PyObject *unused) {
    return PyUnicode_FromString(has_vnni() ? "avx512-vnni" : has_avx2() ? "avx2" : "none");
}

/* What is wrong with the dimension or the query rows (both entry points), or NULL. */
static const char *query_shape_error(Py_ssize_t dim, Py_ssize_t nq, Py_ssize_t query_bytes) {
    if (dim <= 0 || dim % 64 != 0) return "dim must be a positive multiple of 64";
    if (nq < 1 || nq > MAX_QUERIES || query_bytes != nq * dim)
        return "queries must hold 1 to 8 rows of dim bytes";
    return NULL;
}

/* bias[j] = times x the sum of query row j's bytes: what the unsigned operand's offset
 * added to each product. */
static inline void offset_bias(const int8_t *queries, Py_ssize_t nq, Py_ssize_t dim, int32_t times,
                        int32_t *bias) {
    for (Py_ssize_t j = 0; j < nq; j++) {
        int32_t sum = 0;
        for (Py_ssize_t d = 0; d < dim; d++) sum += queries[j * dim + d];
        bias[j] = times * sum;
    }
}

/* dot_rows(codes, queries, out, dim, start, stop, rows):
 * out[j, i] = codes[rows[i]] . queries[j] for start <= i < stop (rows None: codes[i]), as
 * float32; codes (count, dim) and queries (nq, dim) int8, rows int64, out (nq, width)
 * float32, all C-contiguous: each query's scores are one contiguous run, as the ranking
 * reads them. Releases the GIL while it runs. */
static PyObject *dot_rows(PyObject *self, PyObject *args) {
    Py_buffer codes, queries, out, rows = {0};
    Py_ssize_t dim, start, stop;
    PyObject *rows_object;
    if (!PyArg_ParseTuple(args, "y*y*w*nnnO", &codes, &queries, &out, &dim, &start, &stop,
                          &rows_object))
        return NULL;
    if (rows_object != Py_None && PyObject_GetBuffer(rows_object, &rows, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&codes);
        PyBuffer_Release(&queries);
        PyBuffer_Release(&out);
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t nq = dim > 0 ? queries.len / dim : 0;
    Py_ssize_t width = nq > 0 ? out.len / (nq * (Py_ssize_t)sizeof(float)) : 0;
    Py_ssize_t count = dim > 0 ? codes.len / dim : 0;
    const int64_t *row_ids = rows.buf;
    int rows_valid = rows.obj == NULL || rows.len >= stop * (Py_ssize_t)sizeof(int64_t);
    for (Py_ssize_t i = start; rows_valid && rows.obj != NULL && i < stop; i++)
        rows_valid = row_ids[i] >= 0 && row_ids[i] < count;
    int vnni = has_vnni();
    int queries_in_range = 1; /* the AVX2 path needs query bytes within -127..127 */
    for (Py_ssize_t k = 0; !vnni && k < queries.len; k++)
        queries_in_range = queries_in_range && ((const int8_t *)queries.buf)[k] != -128;
    const char *shape_error = query_shape_error(dim, nq, queries.len);
    if (!cpu_supported()) {
        PyErr_SetString(PyExc_RuntimeError, "this CPU has neither AVX-512 VNNI nor AVX2");
    } else if (shape_error) {
        PyErr_SetString(PyExc_ValueError, shape_error);
    } else if (out.len != nq * width * (Py_ssize_t)sizeof(float) || start < 0 ||
               stop < start || stop > width || (rows.obj == NULL && stop > count) ||
               !rows_valid) {
        PyErr_SetString(PyExc_ValueError, "row range or rows outside codes or out");
    } else if (!queries_in_range) {
        PyErr_SetString(PyExc_ValueError, "query bytes must lie within -127..127 on AVX2");
    } else {
#if HAVE_VNNI_KERNEL
        int32_t bias[MAX_QUERIES];
        const int8_t *query_bytes = queries.buf;
        offset_bias(query_bytes, nq, dim, 128, bias);
        Py_BEGIN_ALLOW_THREADS
        (vnni ? KERNELS : AVX2_KERNELS)[nq](codes.buf, dim, rows.obj ? row_ids : NULL, start,
                                            stop, query_bytes, bias, out.buf, width);
        Py_END_ALLOW_THREADS
        result = Py_None;
        Py_INCREF(result);
#endif
    }
    PyBuffer_Release(&codes);
    PyBuffer_Release(&queries);
    PyBuffer_Release(&out);
    if (rows.obj != NULL) PyBuffer_Release(&rows);
    return result;
}

/* dot_nibbles(nibbles, queries, out, dim, start, stop, scale): out[j, i] = scale x
 * (int4 codes of row i) . queries[j] for start <= i < stop, as float32; nibbles (count,
 * dim / 2) uint8 in the layout above, queries (nq, dim) int8, out (nq, width) float32, all
 * C-contiguous. AVX2 (every CPU with AVX-512 VNNI has it). Releases the GIL while it runs. */
static PyObject *dot_nibbles(PyObject *self, PyObject *args) {
    Py_buffer nibbles, queries, out;
    Py_ssize_t dim, start, stop;
    float scale;
    if (!PyArg_ParseTuple(args, "y*y*w*nnnf", &nibbles, &queries, &out, &dim, &start, &stop,
                          &scale))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t nq = dim > 0 ? queries.len / dim : 0;
    Py_ssize_t width = nq > 0 ? out.len / (nq * (Py_ssize_t)sizeof(float)) : 0;
    Py_ssize_t count = dim > 1 ? nibbles.len / (dim / 2) : 0;
    const char *shape_error = query_shape_error(dim, nq, queries.len);
    if (!has_avx2()) {
        PyErr_SetString(PyExc_RuntimeError, "this CPU has no AVX2");
    } else if (shape_error) {
        PyErr_SetString(PyExc_ValueError, shape_error);
    } else if (nibbles.len != count * (dim / 2)) {
        PyErr_SetString(PyExc_ValueError, "nibbles must hold dim / 2 bytes per row");
    } else if (out.len != nq * width * (Py_ssize_t)sizeof(float) || start < 0 ||
               stop < start || stop > width || stop > count) {
        PyErr_SetString(PyExc_ValueError, "row range outside nibbles or out");
    } else {
#if HAVE_VNNI_KERNEL
        int32_t bias[MAX_QUERIES];
        const int8_t *query_bytes = queries.buf;
        offset_bias(query_bytes, nq, dim, 8, bias);
        Py_BEGIN_ALLOW_THREADS
        NIBBLE_KERNELS[nq](nibbles.buf, dim, start, stop, query_bytes, bias, scale, out.buf,
                           width);
        Py_END_ALLOW_THREADS
        result = Py_None;
        Py_INCREF(result);
#endif
    }
    PyBuffer_Release(&nibbles);
    PyBuffer_Release(&queries);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef METHODS[] = {
    {"supported", supported, METH_NOARGS, "True when this CPU runs a kernel (AVX-512 VNNI or AVX2)."},
    {"instruction_set", instruction_set, METH_NOARGS,
     "The kernel this CPU runs: 'avx512-vnni', 'avx2' or 'none'."},
    {"dot_rows", dot_rows, METH_VARARGS,
     "dot_rows(codes, queries, out, dim, start, stop, rows): out[j, i] = codes[rows[i]] .\n"
     "queries[j] for start <= i < stop (rows None: codes[i]), as float32."},
    {"dot_nibbles", dot_nibbles, METH_VARARGS,
     "dot_nibbles(nibbles, queries, out, dim, start, stop, scale): out[j, i] = scale x\n"
     "(int4 codes of row i) . queries[j] for start <= i < stop, as float32."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, "_int8dot", "Int8 dot products of rows against up to 8 queries.",
    -1, METHODS,
};

PyMODINIT_FUNC PyInit__int8dot(void) { return PyModule_Create(&MODULE); }
