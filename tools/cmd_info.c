#include <stdio.h>
#include "tools/commands.h"
int cmd_info(int argc, char **argv) { fprintf(stderr, "cinder info: not built yet\n"); return 1; }
