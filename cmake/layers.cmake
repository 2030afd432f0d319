# The layers: each module names the modules it builds on and the public headers
# (include/ctrain/) it owns. A module may include the headers, public and internal, of its own,
# of the modules it names and of everything below those, and nothing above. The build gives each
# module's object library an include path with only those folders (CMakeLists.txt), so an
# upward include of an internal header fails to compile; the test layers_should_point_one_way
# (cmake/check-layers.cmake) checks every include, the public headers' too, which share one
# folder and so are all on every include path.
#
# Modules are declared bottom up, so that a module can only build on one declared before it and
# the graph has no cycles. The top layer, ctrain, is the command-line tool (tools/ctrain) and
# owns the umbrella header ctrain.h, which is for programs using the library, never for the
# library itself.
#
#   ct_layer(<module> [USES <module>...] [HEADERS <header>...])
# sets CT_BELOW_<module> (the modules it names and everything they build on) and
# CT_HEADERS_<module>, and appends the module to CT_LAYERS.

set(CT_LAYERS)

function(ct_layer module)
    cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "USES;HEADERS")
    if(module IN_LIST CT_LAYERS)
        message(FATAL_ERROR "layers: module '${module}' is declared twice")
    endif()
    set(below)
    foreach(d IN LISTS arg_USES)
        if(NOT d IN_LIST CT_LAYERS)
            message(FATAL_ERROR "layers: '${module}' uses '${d}', which is not declared before it")
        endif()
        list(APPEND below ${d} ${CT_BELOW_${d}})
    endforeach()
    list(REMOVE_DUPLICATES below)
    set(CT_BELOW_${module} "${below}" PARENT_SCOPE)
    set(CT_HEADERS_${module} "${arg_HEADERS}" PARENT_SCOPE)
    set(CT_LAYERS ${CT_LAYERS} ${module} PARENT_SCOPE)
endfunction()

#        module      builds on              owns include/ctrain/...
ct_layer(core                               HEADERS status.h options.h rng.h crc32c.h)
ct_layer(tensor      USES core              HEADERS tensor.h)
ct_layer(kernels     USES core)
ct_layer(autograd    USES tensor            HEADERS autograd.h)
ct_layer(ops         USES autograd kernels  HEADERS ops.h)
ct_layer(nn          USES ops               HEADERS nn.h model.h)
ct_layer(loss        USES ops               HEADERS loss.h)
ct_layer(optim       USES nn                HEADERS optim.h schedule.h)
ct_layer(metrics     USES tensor            HEADERS metrics.h)
ct_layer(data        USES tensor kernels    HEADERS data.h)
ct_layer(dist        USES core              HEADERS dist.h)
ct_layer(ckpt        USES optim             HEADERS checkpoint.h)
ct_layer(config      USES core              HEADERS config.h)
ct_layer(log         USES ckpt config       HEADERS report.h tboard.h)
ct_layer(train       USES ckpt data dist loss metrics
                                            HEADERS trainer.h policy.h)
ct_layer(experiment  USES train log         HEADERS experiment.h)
ct_layer(export      USES experiment        HEADERS export.h)
# the library's modules (src/<module>), bottom up
set(CT_MODULES ${CT_LAYERS})
ct_layer(ctrain      USES export            HEADERS ctrain.h)
