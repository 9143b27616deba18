// The 02_safe_softmax program: the CLI contract of common/cli.hpp around safe_softmax::forward.
#include "cli.hpp"
#include "stage_02.hpp"

int main(int argc, char** argv) { return fa::stage_main(argc, argv, stage_02()); }
