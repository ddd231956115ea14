started="2026-11-30 15:48:51 UTC"
elapsed="1231"
commit="7dc039a"
COUNT="6" BENCHTIME="4s" BENCH="."
