/* fd_api_version: lets the Python loader refuse a stale build of the library. */
#include "flashdesk.h"

int32_t fd_api_version(void) { return 3; }
