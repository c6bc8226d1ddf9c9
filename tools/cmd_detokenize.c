#include <stdio.h>
#include "tools/commands.h"
int cmd_detokenize(int argc, char **argv) { fprintf(stderr, "cinder detokenize: not built yet\n"); return 1; }
