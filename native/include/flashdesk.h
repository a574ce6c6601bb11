/* flashdesk native library: the host-side math of the speculative step.
 *
 * What it is: path selectors over the DFlash 2 lattice and token acceptance,
 * callable through a small C API (llama.cpp style: fd_<noun>_<verb>, sized ints,
 * status codes, never aborts on bad input). What it is not: anything that touches
 * llama.cpp or a model; callers pass plain arrays.
 */
#ifndef FLASHDESK_H
#define FLASHDESK_H

#include <stdint.h>

#if defined(_WIN32) && defined(FD_BUILD)
#  define FD_API __declspec(dllexport)
#elif defined(_WIN32)
#  define FD_API __declspec(dllimport)
#elif defined(FD_BUILD)
#  define FD_API __attribute__((visibility("default")))
#else
#  define FD_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    FD_OK = 0,
    FD_ERR_ARG = -1,   /* a NULL pointer, a size out of range */
    FD_ERR_VALUE = -2, /* a NaN or otherwise unusable number in the input */
} fd_status;

/* Version of this library's API; bump on any change of a signature. */
FD_API int32_t fd_api_version(void);

#ifdef __cplusplus
}
#endif

#endif /* FLASHDESK_H */
