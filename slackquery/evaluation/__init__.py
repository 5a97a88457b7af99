"""Relevance evaluation: judged queries in, Recall@k / MRR / nDCG / latency tables out.

`queries` loads and checks judged query files, `metrics` holds the pure metric functions,
`grid` expands fusion parameter grids, `runner` drives the real pipeline and search engine,
and `report` writes JSON, Markdown, the plot and per-query rows. docs/evaluation.md
defines every metric.
"""

MODES = ("lexical", "semantic", "hybrid")
