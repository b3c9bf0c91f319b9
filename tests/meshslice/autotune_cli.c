/* autotune_cli.c - `einc_autotune ARGS` runs `einc autotune ARGS` (for tests
 * and the study script; the einc driver dispatches the same function). */
#include "autotune.h"

int main(int argc, char **argv)
{
    return autotune_main(argc, argv);
}
