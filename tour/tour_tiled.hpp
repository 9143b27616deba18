// Stages 04 and 06 for the tour, from their own translation unit (tour_tiled.cpp): they are built
// with FMA contraction (-ffp-contract=fast), as in their own programs, while tour.cpp's stages
// 01-03 and fa_common's stage 01 baseline are built without it. With one set of floating-point
// flags per file, no template is instantiated under two sets in one program (the linker would
// keep either copy, and stage 01's numbers in the tour could differ from its program's).
#pragma once
#include "stage.hpp"

fa::Stage tour_stage_04();
fa::Stage tour_stage_06();
// The vector ISA stages 04 and 06 were built for ("AVX-512") and its floats per vector.
const char* tour_tiled_isa();
int tour_tiled_vector_width();
