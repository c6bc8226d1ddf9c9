#include <stdio.h>
#include "tools/commands.h"
int cmd_mkmodel(int argc, char **argv) { fprintf(stderr, "cinder mkmodel: not built yet\n"); return 1; }
