/* A program that leaks from its own code ("own") and from a shared library
 * it loads (like a GPU driver), closed again or not ("close"): the cases
 * tests/sanitizers.py must tell apart. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *volatile sink; /* volatile: the allocations are not optimised away */

__attribute__((noinline)) static void own_leak(void) {
    for (int i = 0; i < 8; i++) sink = malloc(77);
    sink = 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    if (argc > 2 && !strcmp(argv[2], "own")) own_leak();
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) return 3;
    void *(*library_leak)(void) = (void *(*)(void))dlsym(lib, "library_leak");
    for (int i = 0; i < 4; i++) sink = library_leak();
    sink = 0;
    if (argc > 3 && !strcmp(argv[3], "close")) dlclose(lib);
    puts("ALL OK");
    return 0;
}
