/* cinder: one binary, one subcommand per job. Each subcommand lives in tools/cmd_<name>.c
 * and returns a process exit status; errors go to stderr. With CINDER_VK_VALIDATION set (the
 * test run sets it), a command during which the validation layer reported anything exits
 * non-zero: API misuse fails the CLI and server tests too. */
#include <stdio.h>
#include <string.h>

#include "runtime/vk/vk_instance.h"
#include "tools/commands.h"

static const struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} commands[] = {
#define X(name, help) {#name, cmd_##name, help},
    CINDER_COMMANDS(X)
#undef X
};

static void usage(FILE *out) {
    fprintf(out, "usage: cinder <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-11s %s\n", commands[i].name, commands[i].help);
    fprintf(out, "\n'cinder <command> --help' describes a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name)) continue;
        int rc = commands[i].run(argc - 1, argv + 1);
        unsigned long long v = cvk_validation_errors();
        if (v) fprintf(stderr, "cinder: failing: %llu Vulkan validation message%s above\n", v, v == 1 ? "" : "s");
        return v && !rc ? 1 : rc;
    }
    fprintf(stderr, "cinder: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
