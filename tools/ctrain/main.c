/*
 * main.c - the ctrain command-line tool. For now it answers --version and --help; the commands
 * (fit, eval, predict, config, inspect) arrive with the command-line issue.
 *
 * Exit codes: 0 success, 2 usage error.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "ctrain/ctrain.h"

static void usage(FILE *f) {
    (void)fprintf(f, "usage: ctrain [--version] [--help]\n"
                     "\n"
                     "ctrain is a model-training framework in C. This build provides the library\n"
                     "(libctrain: tensors, autograd, ops, losses, optimizers) and this tool's\n"
                     "--version and --help; the training commands are not part of this build.\n"
                     "\n"
                     "options:\n"
                     "  -V, --version   print the version and exit\n"
                     "  -h, --help      print this help and exit\n"
                     "\n"
                     "exit codes: 0 success, 2 usage error\n");
}

int main(int argc, char **argv) {
    static const struct option opts[] = {
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+Vh", opts, NULL)) != -1) {
        switch (c) {
        case 'V':
            printf("ctrain %s\n", ct_version());
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        default:
            (void)fprintf(stderr, "ctrain: unknown option '%s'\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        (void)fprintf(stderr, "ctrain: unknown command '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    usage(stderr);
    return 2;
}
