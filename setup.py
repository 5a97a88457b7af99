"""The one compiled part: serving's int8 dot-product kernel (serving/_int8dot.c).

Optional: where it cannot be built (no C compiler) or the CPU lacks AVX-512 VNNI, the
vector scan runs on simsimd alone, with the same scores (serving/semantic.py).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("serving._int8dot", sources=["serving/_int8dot.c"], optional=True),
    ]
)
