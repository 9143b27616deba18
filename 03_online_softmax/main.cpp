// The 03_online_softmax program: the CLI contract of common/cli.hpp around online_softmax::forward.
#include "cli.hpp"
#include "stage_03.hpp"

int main(int argc, char** argv) { return fa::stage_main(argc, argv, stage_03()); }
