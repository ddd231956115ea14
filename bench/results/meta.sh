started="2026-11-30 12:59:43 UTC"
elapsed="1017"
commit="b7bd784"
COUNT="5" BENCHTIME="4s" BENCH="."
