started="2026-12-03 18:49:40 UTC"
elapsed="1669"
commit="3e0de1e"
COUNT="6" BENCHTIME="4s" BENCH="."
