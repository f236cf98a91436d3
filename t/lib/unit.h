
/*
 * The TAP output of the unit tests of t/lib, see unit.c
 */

#ifndef _ZK_LOCK_UNIT_H_INCLUDED_
#define _ZK_LOCK_UNIT_H_INCLUDED_


extern int  tests, failed;

void ok(int pass, const char *what);


#endif /* _ZK_LOCK_UNIT_H_INCLUDED_ */
