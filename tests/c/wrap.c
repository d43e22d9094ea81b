/* A shared object that embeds libweir.a with -Wl,--exclude-libs,ALL (as the nginx module and
 * other plugins do): it must link cleanly and export only its own symbols. */
#include "weir.h"

__attribute__((visibility("default"))) const char *
wrap_version(void)
{
    return weir_version();
}
