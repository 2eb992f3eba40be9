/* cgequi_plugin.cpp: `plugin load cgequiplugin.so` entry point for LAMMPS built with the PLUGIN package. */
#include "lammps.h"
#include "pair_cgequi.h"

using namespace LAMMPS_NS;

/* The layout of LAMMPS's lammpsplugin_t (src/PLUGIN/lammpsplugin.h), which is not installed with LAMMPS. */
extern "C" {
typedef void *(lammpsplugin_factory1)(void *);
typedef struct {
    const char *version;
    const char *style;
    const char *name;
    const char *info;
    const char *author;
    union {
        lammpsplugin_factory1 *v1;
        void *v2;
    } creator;
    void *handle;
} lammpsplugin_t;
typedef void (*lammpsplugin_regfunc)(lammpsplugin_t *, void *);
}

static Pair *cgequi_creator(LAMMPS *lmp) { return new PairCGEqui(lmp); }

extern "C" void lammpsplugin_init(void *lmp, void *handle, void *regfunc) {
    lammpsplugin_t plugin;
    plugin.version = static_cast<LAMMPS *>(lmp)->version; /* built against this LAMMPS's headers */
    plugin.style = "pair";
    plugin.name = "cgequi";
    plugin.info = "cgequi: MACE/NequIP equivariant potentials without libtorch";
    plugin.author = "cgequi developers";
    plugin.creator.v1 = (lammpsplugin_factory1 *)&cgequi_creator;
    plugin.handle = handle;
    (*(lammpsplugin_regfunc)regfunc)(&plugin, lmp);
}
