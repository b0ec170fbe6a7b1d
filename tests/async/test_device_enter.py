"""A Device is entered once (issue 10 leftovers): a nested or concurrent second `with` /
`async with` on an open device is a DeviceError naming it, and the outer block keeps a
working device (the inner exit used to close it). Runs on asyncio and trio."""
import anyio
import numpy as np
import pytest

import hipdnn_async as hd


def scale_graph():
    """y = x * s (per-channel scale as a 1x1 conv with a diagonal filter)."""
    g = hd.Graph(name="scale")
    x = g.tensor(dims=(1, 2, 3, 3), name="x")
    w = g.tensor(dims=(2, 2, 1, 1), name="w")
    y = g.conv_fprop(x, w).set_output(True)
    return g, x, w, y


def run_once(plan, x, w, y):
    xa = np.arange(18, dtype=np.float32).reshape(1, 2, 3, 3)
    wa = np.diag([2.0, -3.0]).astype(np.float32).reshape(2, 2, 1, 1)
    ya = np.full(y.dims, np.nan, np.float32)
    return xa, wa, ya, {x: xa, w: wa, y: ya}


def expected(xa):
    return xa.astype(np.float64) * np.array([2.0, -3.0]).reshape(1, 2, 1, 1)


@pytest.mark.anyio
async def test_nested_async_with_is_refused_and_the_device_stays_open(anyio_backend):
    g, x, w, y = scale_graph()
    async with hd.Device("cpu", streams=1) as dev:
        with pytest.raises(hd.DeviceError, match=r"async with: device 'cpu' is already "
                                                 r"entered") as err:
            async with dev:
                pass                                    # pragma: no cover
        assert err.value.code == "INVALID_VALUE"
        with pytest.raises(hd.DeviceError, match="with: device 'cpu' is already entered"):
            with dev:                                   # the sync form inside, too
                pass                                    # pragma: no cover
        plan = await dev.build(g)                       # still open after both refusals
        xa, _, ya, pack = run_once(plan, x, w, y)
        await plan.execute(pack)
        np.testing.assert_allclose(ya, expected(xa), rtol=1e-6)
    with pytest.raises(hd.DeviceError, match="after close"):  # the outer exit closed it
        await plan.execute(pack)


@pytest.mark.anyio
async def test_a_second_task_entering_an_open_device_is_refused(anyio_backend):
    errors = []
    async with hd.Device("cpu", streams=1) as dev:
        async def enter_again():
            try:
                async with dev:
                    pass                                # pragma: no cover
            except hd.DeviceError as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(enter_again)
        g, x, w, y = scale_graph()
        plan = await dev.build(g)
        xa, _, ya, pack = run_once(plan, x, w, y)
        await plan.execute(pack)
    assert len(errors) == 1 and "already entered" in str(errors[0])
    np.testing.assert_allclose(ya, expected(xa), rtol=1e-6)


def test_nested_sync_with_is_refused_and_the_device_stays_open():
    g, x, w, y = scale_graph()
    with hd.Device("cpu", streams=1) as dev:
        with pytest.raises(hd.DeviceError, match="with: device 'cpu' is already entered"):
            with dev:
                pass                                    # pragma: no cover
        plan = dev.build_sync(g)
        xa, _, ya, pack = run_once(plan, x, w, y)
        plan.execute_sync(pack)
        np.testing.assert_allclose(ya, expected(xa), rtol=1e-6)
    with pytest.raises(hd.DeviceError, match="closed"):
        with dev:
            pass                                        # pragma: no cover


def test_a_device_used_without_with_can_still_be_entered_once():
    dev = hd.Device("cpu", streams=1)
    g, x, w, y = scale_graph()
    plan = dev.build_sync(g)
    with dev:
        xa, _, ya, pack = run_once(plan, x, w, y)
        plan.execute_sync(pack)
    np.testing.assert_allclose(ya, expected(xa), rtol=1e-6)
