/* Stands in for a driver that keeps memory until the process exits. */
#include <stdlib.h>
#include <string.h>

void *library_leak(void) {
    char *p = realloc(NULL, 128);
    if (p) memset(p, 2, 128);
    return p;
}
