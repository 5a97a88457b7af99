"""The compiled parts of serving: the int8 dot-product kernel (serving/_int8dot.c) and the
BM25 top-rows walk (serving/_bm25.c).

Both optional: where they cannot be built (no C compiler) or the CPU lacks AVX-512 VNNI,
the vector scan runs on simsimd and BM25 on NumPy, with the same scores
(serving/semantic.py, serving/lexical.py).
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
