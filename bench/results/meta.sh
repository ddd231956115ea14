started="2026-11-30 09:11:55 UTC"
elapsed="879"
commit="3b39b44"
COUNT="5" BENCHTIME="4s" BENCH="."
