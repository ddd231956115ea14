started="2026-12-01 07:17:08 UTC"
elapsed="627"
commit="fe0b6b6"
COUNT="5" BENCHTIME="2s" BENCH="."
