/*
 * fake_mpi.c - a stand-in for libctrain_mpi whose MPI library cannot be found, for test_dist's
 * check of the loader's message: built twice (tests/CMakeLists.txt), as the "MPI library"
 * (CT_FAKE_MPI_LIBRARY) in a folder of its own and as the module that needs it, with no RUNPATH
 * to that folder, so loading the module fails the way it does without libmpi.
 */
#define EXPORTED __attribute__((visibility("default")))

#ifdef CT_FAKE_MPI_LIBRARY
EXPORTED int ct_fake_mpi_init(void);
EXPORTED int ct_fake_mpi_init(void) {
    return 0;
}
#else
int ct_fake_mpi_init(void);
EXPORTED int ct_fake_mpi_module(void);
EXPORTED int ct_fake_mpi_module(void) {
    return ct_fake_mpi_init();
}
#endif
