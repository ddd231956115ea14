started="2026-11-30 13:48:51 UTC"
elapsed="1028"
commit="d3edfc9"
COUNT="5" BENCHTIME="4s" BENCH="."
