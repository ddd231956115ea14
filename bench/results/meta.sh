started="2026-11-30 08:53:48 UTC"
elapsed="866"
commit="76bad30"
COUNT="5" BENCHTIME="4s" BENCH="."
