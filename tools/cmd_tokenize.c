#include <stdio.h>
#include "tools/commands.h"
int cmd_tokenize(int argc, char **argv) { fprintf(stderr, "cinder tokenize: not built yet\n"); return 1; }
