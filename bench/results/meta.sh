started="2026-12-04 05:35:14 UTC"
elapsed="1691"
commit="af86122"
COUNT="6" BENCHTIME="4s" BENCH="."
