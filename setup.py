"""The compiled parts of serving: the int8 dot-product kernel (serving/_int8dot.c) and
BM25's best-rows search (serving/_bm25.c).

Both optional: where they cannot be built (no C compiler), or where the CPU has neither
AVX-512 VNNI nor AVX2 (the kernel), the vector scan runs on simsimd and BM25 on NumPy, with
the same scores (serving/semantic.py, serving/lexical.py).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("serving._int8dot", sources=["serving/_int8dot.c"], optional=True),
        # No fused multiply-add: scores must round as NumPy's multiply-then-add does.
        Extension(
            "serving._bm25",
            sources=["serving/_bm25.c"],
            extra_compile_args=["-ffp-contract=off"],
            optional=True,
        ),
    ]
)
