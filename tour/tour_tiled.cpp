// See tour_tiled.hpp: stages 04 and 06, compiled with their programs' floating-point flags.
#include "tour_tiled.hpp"

#include "stage_04.hpp"
#include "stage_06.hpp"

fa::Stage tour_stage_04() { return stage_04(); }
fa::Stage tour_stage_06() { return stage_06(); }
const char* tour_tiled_isa() { return tiled::mk::kIsa; }
int tour_tiled_vector_width() { return tiled::mk::VW; }
