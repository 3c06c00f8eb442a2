/*
 * The rows `rdmasock stat` shows: this module is the one adapter between the socket layer
 * and the live stats segment (base/statseg.c), which knows no socket. It registers a fill
 * callback that walks the fd table on the publisher thread, only while a reader watches.
 */
#ifndef RSK_SOCKSTAT_H
#define RSK_SOCKSTAT_H

/* Register the rows' source with the segment (once, at library start). */
void rsk_sockstat_register(void);

#endif
