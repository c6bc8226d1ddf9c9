#include <stdio.h>
#include "tools/commands.h"
int cmd_run(int argc, char **argv) { fprintf(stderr, "cinder run: not built yet\n"); return 1; }
