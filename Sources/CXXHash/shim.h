#ifndef VLOG_CXXHASH_SHIM_H
#define VLOG_CXXHASH_SHIM_H

#include <xxhash.h>

#endif
