#ifndef VLOG_CLMDB_SHIM_H
#define VLOG_CLMDB_SHIM_H

#include <lmdb.h>

#endif
