started="2026-12-03 07:40:48 UTC"
elapsed="1393"
commit="cefef23"
COUNT="5" BENCHTIME="4s" BENCH="."
