// The 01_naive program: the CLI contract of common/cli.hpp around naive::forward/backward.
#include "cli.hpp"
#include "stage_01.hpp"

int main(int argc, char** argv) { return fa::stage_main(argc, argv, stage_01()); }
